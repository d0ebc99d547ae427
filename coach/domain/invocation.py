"""The Platform protocol: where functions run. Invocations return a Reply or a Failure value, never raise.

The controller decides what a failure means (stop the job, later retry it); a platform only reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Protocol

#: Nuclio handler of each parameter-server role (`spec.handler` in functions/<role>/function.yaml).
ROLE_HANDLERS: Mapping[str, str] = {
    "scheduler": "functions.scheduler.main:handler",
    "server": "functions.server.main:handler",
    "worker": "functions.worker.main:handler",
}


@dataclass(frozen=True)
class FunctionRef:
    name: str  # unique function name, e.g. "lenet-worker-0"
    role: str  # a key of ROLE_HANDLERS
    node: str  # logical node it was placed on
    url: str  # where its HTTP trigger listens


@dataclass(frozen=True)
class Reply:
    function: str  # FunctionRef.name
    body: Mapping  # the handler's JSON reply
    duration_s: float  # request sent -> reply received, as the controller measured it


@dataclass(frozen=True)
class Failure:
    function: str  # FunctionRef.name (or the name that failed to deploy)
    kind: str  # "deploy", "unreachable", "timeout", "error" or "rejected" (the request itself is wrong)
    message: str  # one line for the log and the live view
    duration_s: float = 0.0  # time spent before the failure was known
    body: Mapping = field(default_factory=dict)  # the reply, when the function answered with an error

    @property
    def retryable(self) -> bool:
        """A rejected request (bad payload, broken model file) fails the same way on a fresh instance."""
        return self.kind != "rejected"

    def describe(self) -> str:
        return f"{self.function}: {self.kind}: {self.message}"


class Platform(Protocol):
    def deploy(self, name: str, role: str, node: str) -> FunctionRef | Failure: ...

    def invoke(self, ref: FunctionRef, payload: Mapping, timeout_s: float) -> Reply | Failure: ...

    def cancel(self, ref: FunctionRef) -> None: ...

    def remove(self, ref: FunctionRef) -> None: ...

    def rendezvous_address(self, scheduler: FunctionRef) -> tuple[str, int]: ...

    def live_functions(self) -> list[str]: ...

    def close(self) -> None: ...
