"""A platform whose epochs are computed, not run: durations from a speed model, losses from a convergence curve.

It answers at once with the simulated duration in each reply; the virtual-time driver advances its clock by
it. Workers answer with the same typed replies real workers send, and rank 0 marks its checkpoint saved in a
memory store, so the lifecycle cannot tell the difference. Pure apart from that store; seeded where random.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Protocol

from coach.domain.contracts import EpochRequest, WarmRequest, WorkerReply
from coach.domain.identity import FunctionId, Role
from coach.domain.invocation import ERROR, TIMEOUT, Failure, FunctionRef, Reply


class SavedMarks(Protocol):
    """Where simulated rank-0 workers mark the checkpoints they 'saved' (coach.storage's memory store)."""

    def mark_saved(self, prefix: str) -> None: ...


@dataclass(frozen=True)
class SimModel:
    """How one simulated job trains: speed surface (full epochs/s) and loss after k steps."""

    samples: int = 5000  # training samples of a full epoch
    fixed_s: float = 0.4  # per-epoch cost that does not scale with the data (rendezvous, checkpoint)
    compute_s_one_worker: float = 2.0  # training loop of a full epoch with one worker and one server
    worker_efficiency: float = 0.8  # each extra worker adds this share of a worker's speed
    server_overhead_s: float = 0.05  # per-epoch cost of each server beyond the first
    loss_a: float = 0.5  # loss(k) = 1 / (a k + b) + c, as the convergence fit assumes
    loss_b: float = 0.4
    loss_c: float = 0.05

    def compute_s(self, workers: int, servers: int, fraction: float) -> float:
        speedup = 1 + self.worker_efficiency * (workers - 1)
        return self.compute_s_one_worker * fraction / speedup

    def epoch_s(self, workers: int, servers: int, fraction: float) -> float:
        return self.fixed_s + self.server_overhead_s * (servers - 1) + self.compute_s(workers, servers, fraction)

    def loss(self, step: int) -> float:
        return 1.0 / (self.loss_a * step + self.loss_b) + self.loss_c


@dataclass
class SimulatedPlatform:
    """Deploys are instant; an epoch takes the model's time; failures are injected by (job, step, attempt)."""

    store: SavedMarks
    models: Mapping[str, SimModel] = field(default_factory=dict)  # job -> its model (default: SimModel())
    fail: frozenset[tuple[str, int, int]] = frozenset()  # (job, step, attempt) whose epoch fails
    deploy_s: float = 0.0  # simulated time a deploy takes
    removed: list[str] = field(default_factory=list)  # names of removed functions, for tests
    _live: set[FunctionId] = field(default_factory=set)

    def deploy(self, fid: FunctionId, node: str) -> FunctionRef | Failure:
        self._live.add(fid)
        return FunctionRef(fid=fid, node=node, url=f"sim://{node}/{fid.name}", host=node)

    def invoke(self, ref: FunctionRef, request: EpochRequest | WarmRequest, timeout_s: float) -> Reply | Failure:
        if ref.fid not in self._live:
            return Failure(ref.name, "unreachable", "function was removed")
        if isinstance(request, WarmRequest):
            return Reply(ref.name, {"warm": True, "role": ref.role}, self.deploy_s)
        model = self.models.get(ref.fid.job, SimModel())
        ps = request.ps
        wall_s = model.epoch_s(ps.num_workers, ps.num_servers, request.data_fraction)
        if wall_s > request.deadline_s:  # as the runtime does: it gives up at its deadline (HTTP 504)
            return Failure(ref.name, TIMEOUT, f"deadline of {request.deadline_s:g} s exceeded", request.deadline_s)
        if (ref.fid.job, request.step, request.attempt) in self.fail:
            return Failure(ref.name, ERROR, f"injected failure at step {request.step}", wall_s / 2)
        if ref.fid.role != Role.WORKER:
            return Reply(ref.name, {"role": ref.role, "compute_s": wall_s}, wall_s)
        return Reply(ref.name, self._worker_reply(ref.fid, request, model, wall_s), wall_s)

    def _worker_reply(self, fid: FunctionId, request: EpochRequest, model: SimModel, wall_s: float) -> dict:
        workers = request.ps.num_workers
        samples = max(int(math.ceil(model.samples * request.data_fraction)) // workers, 1)
        loss = model.loss(request.step)
        saved = None
        if fid.index == 0:
            saved = request.checkpoint_save
            self.store.mark_saved(saved)
        reply = WorkerReply(rank=fid.index, num_workers=workers, loss_sum=loss * samples, samples=samples,
                            correct=int(samples * max(0.0, 1.0 - loss / 2.5)),
                            compute_s=model.compute_s(workers, request.ps.num_servers, request.data_fraction),
                            checkpoint_saved=saved)
        return {**reply.to_dict(), "role": "worker"}

    def cancel(self, ref: FunctionRef) -> None:
        pass

    def remove(self, ref: FunctionRef) -> None:
        self._live.discard(ref.fid)
        self.removed.append(ref.name)

    def rendezvous_address(self, scheduler: FunctionRef) -> tuple[str, int]:
        return scheduler.host, 9091

    def close(self) -> None:
        self._live.clear()
