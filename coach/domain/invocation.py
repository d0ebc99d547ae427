"""What a platform hands back: a deployed function, a reply, or a failure value. Plain data, no I/O.

Invocations never raise across the platform boundary: the lifecycle decides what a failure means (stop the
job, or retry it with a bound); a platform only reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from coach.domain.identity import FunctionId

#: Failure kinds a platform reports.
DEPLOY, UNREACHABLE, TIMEOUT, ERROR, REJECTED = "deploy", "unreachable", "timeout", "error", "rejected"
#: A function whose ps-lite node a peer from outside the job broke (ps-lite aborts on bytes that are not its own):
#: retried, and not counted against the job's retries (docs/failures.md).
FOREIGN = "foreign"


@dataclass(frozen=True)
class FunctionRef:
    fid: FunctionId  # which function of which job
    node: str  # logical node it was placed on
    url: str  # where its HTTP trigger listens
    host: str = "127.0.0.1"  # the address the node is reached at (sent to ps-lite as DMLC_NODE_HOST)
    instance: str = ""  # which instance of the function (a pid, a Nuclio deployment): remove() takes that one

    @property
    def name(self) -> str:
        return self.fid.name

    @property
    def role(self) -> str:
        return self.fid.role.value


@dataclass(frozen=True)
class Reply:
    function: str  # FunctionRef.name
    body: Mapping[str, Any]  # the handler's JSON reply
    duration_s: float  # request sent -> reply received, as the controller measured it


@dataclass(frozen=True)
class Failure:
    function: str  # FunctionRef.name (or the name that failed to deploy)
    kind: str  # DEPLOY, UNREACHABLE, TIMEOUT, ERROR, REJECTED (the request itself is wrong) or FOREIGN
    message: str  # one line for the log and the live view
    duration_s: float = 0.0  # time spent before the failure was known
    body: Mapping[str, Any] = field(default_factory=dict)  # the reply, when the function answered with an error

    @property
    def retryable(self) -> bool:
        """A rejected request (bad payload, broken model file) fails the same way on a fresh instance."""
        return self.kind != REJECTED

    def describe(self) -> str:
        return f"{self.function}: {self.kind}: {self.message}"
