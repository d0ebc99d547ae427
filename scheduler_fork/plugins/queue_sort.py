"""QueueSort plugins: the order in which pending pods are tried (kube: the `Less` of the active queue).

Side effects: none.
"""

from __future__ import annotations

from scheduler_fork.framework import Pod


class JobCreationOrder:
    """The thesis's (and coscheduling's) queue: the job created first goes first; a job's pods by name.

    All pods of a job are thus tried one after the other, before any pod of a later job.
    """

    name = "JobCreationOrder"

    def key(self, pod: Pod) -> tuple:
        return (pod.job_seq, pod.name)


class PrioritySort:
    """kube-scheduler's default queue: higher priority first, then the pod that arrived first."""

    name = "PrioritySort"

    def key(self, pod: Pod) -> tuple:
        return (-pod.priority, pod.seq, pod.name)
