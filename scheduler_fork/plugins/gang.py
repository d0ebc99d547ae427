"""Gang plugins: the thesis's fork of kube's coscheduling plugin, and what makes it deadlock-free.

- PodGroupRoles (PreFilter): the thesis's filter. A job's pods wait until its quorum is present (pending, reserved
  or bound): by default one scheduler, one server and one worker ("waiting for roles: server").
- HeadOfLine (PreFilter): FIFO by job. A job that has not started may start only when it is the earliest ready
  job and no started job still has pods to place. Without it the thesis's gang can deadlock (README.md here,
  "The deadlock").
- QuorumFirst (PreFilter): a pod that does not bring its job closer to its quorum may not take room the quorum
  still needs (an extra server must not take the last slot, or the cpu, the job's worker needs).
- Coscheduling (Reserve/Unreserve + Permit): all or nothing. Pods wait at Permit holding their reservation until
  the job's quorum is reserved, then all bind together; when one times out, the job's waiting pods are rejected.

Side effects: none.
"""

from __future__ import annotations

from scheduler_fork.fit import place_at_once, quorum_members
from scheduler_fork.framework import PENDING, Allow, Pod, PermitVerdict, Reason, Wait


class PodGroupRoles:
    """PreFilter: the job's quorum (every role it needs, and its whole set when required) must be present."""

    name = "PodGroupRoles"

    def pre_filter(self, state, pod: Pod) -> Reason:
        ledger = state.jobs[pod.job]
        group = ledger.group
        if group.met(ledger.present):
            return None
        missing_roles = [role for role, need in group.min_member.items() if ledger.present[role] < need]
        if missing_roles:
            words = []
            for role in missing_roles:
                have, need = ledger.present[role], group.min_member[role]
                words.append(role if have == 0 and need == 1 else f"{role} {have} of {need}")
            return "waiting for roles: " + ", ".join(words)
        return f"waiting for pods: {sum(ledger.present.values())} of {group.whole} present"


class HeadOfLine:
    """PreFilter: one job at a time starts, in job creation order (FIFO head of line).

    A pod passes when its job has already started (holds a reserved or bound pod). A pod of a job that has not
    started passes only when (1) no started job still has pods pending or waiting at Permit, and (2) its job is
    the earliest *ready* job: quorum present and fitting at once the nodes as other schedulers' pods leave them
    (Coach's own pods aside, which leave when their jobs end), pods pending. Jobs
    still waiting for roles do not hold the line. So at most one job at a time holds slots without its quorum,
    and that job is placed before any other starts: README.md here, "The deadlock", says why this rules out deadlock.
    """

    name = "HeadOfLine"

    def pre_filter(self, state, pod: Pod) -> Reason:
        ledger = state.jobs[pod.job]
        if ledger.started:
            return None
        if not ledger.eligible:
            quorum = ledger.group.quorum_pods
            if state.slots_only and quorum > state.total_slots:
                return f"job {pod.job} needs {quorum} slots, the cluster has {state.total_slots}"
            if not ledger.group.met(ledger.present):
                return f"job {pod.job} is not ready: {ledger.group.shortfall(ledger.present)} missing"
            where = "what other schedulers' pods leave of the nodes" if state.others_used else "the nodes even empty"
            return f"job {pod.job} needs {quorum} pods at once and they do not fit {where}: {ledger.misfit}"
        blocker = state.first_open_job()
        if blocker is not None:
            return f"behind job {blocker}, which is still placing its pods"
        head = state.first_ready_job()
        if head is not None and head != pod.job:
            return f"behind job {head}, first in line"
        return None

    def waits_for_turn(self, state, pod: Pod) -> bool:
        """Queueing hint: a ready job behind the first in line passes only when its turn comes (or it changes)."""
        ledger = state.jobs[pod.job]
        if ledger.started or not ledger.eligible or state.first_open_job() is not None:
            return False
        head = state.first_ready_job()
        return head is not None and head != pod.job


class QuorumFirst:
    """PreFilter: keep the room a job's quorum still needs from the job's own extra pods.

    With d = the pods the job still lacks for its quorum (counting reserved and bound pods), a pod that does not
    lower d may take a node only if it and d pending pods that complete the quorum fit the nodes as they are,
    all at once (fit.place_at_once: slots, resources, taints, node affinity). On nodes of slots alone, with one
    slot per pod, that is: d + 1 free slots.
    """

    name = "QuorumFirst"

    def pre_filter(self, state, pod: Pod) -> Reason:
        ledger = state.jobs[pod.job]
        group = ledger.group
        held = ledger.held()
        before = group.deficit(held)
        if before == 0:
            return None
        held[pod.role] += 1
        if group.deficit(held) < before:
            return None
        status = state.status
        pending = [state.pods[n] for n in sorted(ledger.names) if n != pod.name and status[n] == PENDING]
        if place_at_once(state, state.filters, [pod] + quorum_members(group, pending, held),
                         state.current_shapes()) is None:
            return None
        held[pod.role] -= 1
        if state.slots_only:
            return (f"keeping {before} free slot{'s' if before != 1 else ''} for job {pod.job}'s quorum "
                    f"({group.shortfall(held)})")
        return f"keeping room for job {pod.job}'s quorum ({group.shortfall(held)})"


class Coscheduling:
    """Reserve/Unreserve + Permit: a job's quorum binds together or not at all (coscheduling's Permit).

    Permit allows a pod once the job's reserved and bound pods meet the quorum, and then allows every pod of the
    job waiting at Permit with it; before that the pod waits (holding its reservation) for at most the
    scheduler's `permit_timeout_s`. When a waiting pod is rejected (timed out), Unreserve rejects the job's
    other waiting pods too, so the job gives back every slot it held without running.
    """

    name = "Coscheduling"

    def reserve(self, state, pod: Pod, node: int) -> Reason:
        return None

    def unreserve(self, state, pod: Pod) -> tuple[str, ...]:
        ledger = state.jobs.get(pod.job)
        if ledger is None:
            return ()
        return tuple(sorted(name for name in ledger.reserved_names if name != pod.name))

    def permit(self, state, pod: Pod, node: int) -> PermitVerdict:
        ledger = state.jobs[pod.job]
        if ledger.group.met(ledger.held()):
            return Allow(also=tuple(sorted(name for name in ledger.reserved_names if name != pod.name)))
        return Wait(timeout_s=state.permit_timeout_s)
