"""Bind plugin: record the placement (kube's DefaultBinder writes the Binding to the API server).

The pure library has nothing to write: the Scheduler records the binding in its state and reports it in the
CycleResult, and whoever runs the scheduler (the controller, the Kubernetes adapter) carries it out.
Side effects: none.
"""

from __future__ import annotations

from scheduler_fork.framework import Pod, Reason


class DefaultBinder:
    name = "DefaultBinder"

    def bind(self, state, pod: Pod, node: int) -> Reason:
        return None
