"""Why a job waits, in plain words: what it needs, what holds the slots, its place in the queue, the next try and
when it may start with fewer workers. Pure: the board's plain data in, a dict of sentences out.

The scheduler's reasons (kube's "0/3 nodes are available: 3 Insufficient slots.", the gang's "queued", a
deadlock) are read through REASONS, a registry of the phrases a reason may contain and what each means to the
person waiting; a reason no entry knows is shown as it is.
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence

from coach.domain.identity import QUORUM, Role

#: a phrase in a placement's reason -> what it means, in words
REASONS: tuple[tuple[str, str], ...] = (
    ("deadlock", "jobs hold parts of each other's slots and none can start (a deadlock)"),
    ("insufficient slots", "no node has a free slot for its functions"),
    ("insufficient cpu", "no node has the CPU its functions ask for"),
    ("insufficient memory", "no node has the memory its functions ask for"),
    ("unschedulable", "some nodes are cordoned (unschedulable)"),
    ("taint", "some nodes carry a taint its functions do not tolerate"),
    ("no nodes available", "the cluster has no nodes"),
    ("queued", "jobs submitted earlier are placed first (first in, first out)"),
    ("pods not created", "its functions could not be created"),
    ("not created yet", "its functions are being created"),
)
ROLE_ORDER = ("scheduler", "server", "worker")


RETRY = re.compile(r"retry in ([0-9.]+) s")
PLUGIN = re.compile(r"^[A-Z][A-Za-z]*: ")  # a scheduler plugin's name before its reason: "HeadOfLine: "
PODS = re.compile(r"\bpod(s?)\b")
NOT_A_REASON = re.compile(r"retry in [0-9.]+ s|starting with the [0-9]+ placed")  # what the job does meanwhile


def plain_reasons(message: str) -> list[str]:
    """The placement's reasons in `message` ("; " between them), each as words, each once. A reason no entry of
    REASONS knows is shown without the plugin's name before it, and with functions for pods."""
    found: list[str] = []
    for part in (p.strip() for p in message.split("; ") if not NOT_A_REASON.fullmatch(p.strip())):
        text = PLUGIN.sub("", part)
        lowered = text.lower()
        words = [w for phrase, w in REASONS if phrase in lowered] or ([PODS.sub(r"function\1", text)] if text else [])
        found += [w for w in words if w not in found]
    return found


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def waiting_view(job: str, phase: str, message: str, shown_at_s: float, functions: Sequence[Mapping],
                 slots: int, queue: Sequence[str], placement_timeout_s: float) -> dict | None:
    """What a waiting job needs and what stands in its way; None when it is not waiting for slots.

    `functions`: every function on the board ({name, job, role, node}); `queue`: the jobs with functions waiting
    for a node, in submission order."""
    own = [f for f in functions if f["job"] == job]
    pending = [f for f in own if f["node"] is None]
    retry = RETRY.search(message)
    if not pending and phase != "requeued":
        return None
    wanted = {role: sum(1 for f in own if f["role"] == role) for role in ROLE_ORDER}
    placed = len(own) - len(pending)
    view = {"needs": _needs(wanted, len(own), placed), "held_by": _held_by(job, functions, slots),
            "why": plain_reasons(message.split(": ", 1)[1] if ": " in message else message)}
    if job in queue:
        view["queue"] = _queue_place(job, queue)
    view.update(_next_try(retry, shown_at_s, placement_timeout_s))
    if wanted["worker"] > QUORUM[Role.WORKER] or wanted["server"] > QUORUM[Role.SERVER]:
        view["fewer"] = (f"starts with fewer workers as soon as {sum(QUORUM.values())} of its functions are placed "
                         f"(one scheduler, one server, one worker); {placed} placed now")
    return view


def _needs(wanted: Mapping[str, int], functions: int, placed: int) -> str:
    """The job's slots, by role, and how many of them are placed."""
    if not functions:
        return "needs slots for its functions"
    parts = ", ".join(_count(wanted[role], role) for role in ROLE_ORDER if wanted[role])
    return f"needs {_count(functions, 'slot')} ({parts}); {placed} placed"


def _held_by(job: str, functions: Sequence[Mapping], slots: int) -> str:
    """The slots free, and the other jobs that hold the rest, the most first."""
    holders: dict[str, int] = {}
    for f in functions:
        if f["node"] is not None and f["job"] != job:
            holders[f["job"]] = holders.get(f["job"], 0) + 1
    used = sum(1 for f in functions if f["node"] is not None)
    held = ", ".join(f"{name} ({count})" for name, count in sorted(holders.items(), key=lambda kv: -kv[1]))
    return f"{slots - used} of {slots} slots free; held by {held}" if held else f"{slots - used} of {slots} slots free"


def _queue_place(job: str, queue: Sequence[str]) -> str:
    """The job's place in the queue, and the jobs before it."""
    place = queue.index(job) + 1
    ahead = list(queue[:place - 1])
    return "first in the queue" if not ahead else f"number {place} in the queue, after {', '.join(ahead)}"


def _next_try(retry: re.Match | None, shown_at_s: float, placement_timeout_s: float) -> dict:
    """When the job gives its slots back and tries again: at the time its message names, else after the timeout."""
    if retry:
        return {"next_try_s": shown_at_s + float(retry.group(1)),
                "next_try": f"gives its slots back and tries again in {float(retry.group(1)):g} s"}
    return {"next_try": f"if not placed within {placement_timeout_s:g} s it gives its slots back and tries again"}
