"""A platform whose epochs are computed, not run: durations from a speed model, losses from a convergence curve.

It answers at once with the computed duration in each reply; the virtual-time driver advances its clock by
it. Deadlines are honoured as the runtime honours them: the workers leave their training loop the runtime's
reserve before the deadline (coach.domain.deadlines) and reply `stopped_early` with the samples they trained; what
does not fit even so is a timeout (HTTP 504). Workers answer with the same typed replies real workers send, and
rank 0 marks its checkpoint saved in a memory store, so the lifecycle cannot tell the difference. Pure apart
from that store; seeded where random.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Protocol

from coach.domain.contracts import AheadRequest, EpochRequest, WarmReply, WarmRequest, WorkerReply
from coach.domain.deadlines import training_stop_s
from coach.domain.identity import FunctionId, Role
from coach.domain.invocation import ERROR, TIMEOUT, Failure, FunctionRef, Reply


class SavedMarks(Protocol):
    """Where virtual rank-0 workers mark the checkpoints they 'saved' (coach.storage's memory store)."""

    def mark_saved(self, prefix: str) -> None: ...


@dataclass(frozen=True)
class VirtualJobModel:
    """How one job trains in virtual time: speed surface (full epochs/s) and loss after k steps."""

    samples: int = 5000  # training samples of a full epoch
    fixed_s: float = 0.4  # per-epoch cost that does not scale with the data (rendezvous, checkpoint)
    compute_s_one_worker: float = 2.0  # training loop of a full epoch with one worker and one server
    worker_efficiency: float = 0.8  # each extra worker adds this share of a worker's speed
    server_overhead_s: float = 0.05  # per-epoch cost of each server beyond the first
    server_comm_s: float = 0.0  # a full epoch's pushes and pulls through one server; s servers share them (Optimus's
    # step time has a term per server, theta2 * w / p per step: over an epoch of N / (w B) steps, theta2 N / (B p))
    loss_a: float = 0.5  # loss(k) = 1 / (a k + b) + c, as the convergence fit assumes
    loss_b: float = 0.4
    loss_c: float = 0.05

    def compute_s(self, workers: int, servers: int, fraction: float) -> float:
        speedup = 1 + self.worker_efficiency * (workers - 1)
        return (self.compute_s_one_worker / speedup + self.server_comm_s / max(servers, 1)) * fraction

    def epoch_s(self, workers: int, servers: int, fraction: float) -> float:
        return self.fixed_s + self.server_overhead_s * (servers - 1) + self.compute_s(workers, servers, fraction)

    def setup_s(self, servers: int) -> float:
        """The fixed part before the training loop (rendezvous, build, broadcast): half of it, as for LeNet, whose
        set-up takes about as long as what follows its loop (validation, save, teardown)."""
        return (self.fixed_s + self.server_overhead_s * (servers - 1)) / 2

    def run_s(self, workers: int, servers: int, fraction: float, deadline_s: float) -> tuple[float, float]:
        """(wall seconds, share of the training loop done) of an epoch whose workers stop their loop where the
        runtime would; the wall time may still exceed the deadline (then the runtime answers 504)."""
        setup_s, compute_s = self.setup_s(servers), self.compute_s(workers, servers, fraction)
        full_s = self.epoch_s(workers, servers, fraction)
        loop_s = training_stop_s(deadline_s, setup_s) - setup_s  # time the loop may run
        if compute_s <= loop_s:
            return full_s, 1.0
        done = max(0.0, loop_s) / compute_s
        return full_s - compute_s * (1 - done), done

    def loss(self, step: int) -> float:
        return 1.0 / (self.loss_a * step + self.loss_b) + self.loss_c


@dataclass
class VirtualPlatform:
    """Deploys are instant; an epoch takes the model's time; failures are injected by (job, step, attempt)."""

    store: SavedMarks
    models: Mapping[str, VirtualJobModel] = field(default_factory=dict)  # job -> its model (default: VirtualJobModel())
    fail: frozenset[tuple[str, int, int]] = frozenset()  # (job, step, attempt) whose epoch fails
    deploy_s: float = 0.0  # virtual seconds a deploy takes
    removed: list[str] = field(default_factory=list)  # names of removed functions, for tests
    _live: set[FunctionId] = field(default_factory=set)

    def deploy(self, fid: FunctionId, node: str) -> FunctionRef | Failure:
        self._live.add(fid)
        return FunctionRef(fid=fid, node=node, url=f"sim://{node}/{fid.name}", host=node)

    def invoke(self, ref: FunctionRef, request: EpochRequest | WarmRequest | AheadRequest,
               timeout_s: float) -> Reply | Failure:
        if ref.fid not in self._live:
            return Failure(ref.name, "unreachable", "function was removed")
        if isinstance(request, WarmRequest):  # a worker tells its training set's size, as the runtime's do
            model = self.models.get(ref.fid.job, VirtualJobModel())
            told = WarmReply(model.samples if ref.fid.role == Role.WORKER else None)
            return Reply(ref.name, {**told.to_dict(), "role": ref.role}, self.deploy_s)
        if isinstance(request, AheadRequest):  # nothing joins here: an announcement costs nothing
            return Reply(ref.name, {"ahead": True, "role": ref.role}, 0.0)
        model = self.models.get(ref.fid.job, VirtualJobModel())
        ps = request.ps
        wall_s, done = model.run_s(ps.num_workers, ps.num_servers, request.data_fraction, request.deadline_s)
        if done < 1.0:  # the loop trains whole batches: it stopped after the last one it finished
            shard = self._shard(model, request)
            trained = min(shard, int(shard * done) // request.hyper.batch_size * request.hyper.batch_size)
            wall_s -= model.compute_s(ps.num_workers, ps.num_servers, request.data_fraction) * (done - trained / shard)
            done = trained / shard
        if wall_s > request.deadline_s:  # as the runtime does: it gives up at its deadline (HTTP 504)
            return Failure(ref.name, TIMEOUT, f"deadline of {request.deadline_s:g} s exceeded", request.deadline_s)
        if (ref.fid.job, request.step, request.attempt) in self.fail:
            return Failure(ref.name, ERROR, f"injected failure at step {request.step}", wall_s / 2)
        if ref.fid.role != Role.WORKER:
            return Reply(ref.name, {"role": ref.role, "compute_s": wall_s}, wall_s)
        return Reply(ref.name, self._worker_reply(ref.fid, request, model, done), wall_s)

    def _worker_reply(self, fid: FunctionId, request: EpochRequest, model: VirtualJobModel, done: float) -> dict:
        """Rank 0 saves unless it trained nothing; a cut epoch trains whole batches only."""
        workers = request.ps.num_workers
        shard = self._shard(model, request)
        samples = shard if done >= 1.0 else round(shard * done)
        loss = model.loss(request.step - 1 + samples / shard)
        saved = None
        if fid.index == 0 and samples:
            saved = request.checkpoint_save
            self.store.mark_saved(saved)
        reply = WorkerReply(rank=fid.index, num_workers=workers, loss_sum=loss * samples, samples=samples,
                            correct=int(samples * max(0.0, 1.0 - loss / 2.5)),
                            compute_s=model.compute_s(workers, request.ps.num_servers, request.data_fraction) * done,
                            checkpoint_saved=saved, stopped_early=done < 1.0, shard_samples=shard)
        return {**reply.to_dict(), "role": "worker"}

    @staticmethod
    def _shard(model: VirtualJobModel, request: EpochRequest) -> int:
        """Samples each worker's whole pass trains."""
        return max(int(math.ceil(model.samples * request.data_fraction)) // request.ps.num_workers, 1)

    def cancel(self, ref: FunctionRef) -> None:
        pass

    def remove(self, ref: FunctionRef) -> None:
        self._live.discard(ref.fid)
        self.removed.append(ref.name)

    def joins_ahead(self, scheduler: FunctionRef) -> bool:
        return True  # nothing joins: the announcement only travels in the requests

    def rendezvous_address(self, scheduler: FunctionRef, avoid_ports: frozenset[int] = frozenset()) -> tuple[str, int]:
        return scheduler.host, next(port for port in (9091, 9092, 9093) if port not in avoid_ports)

    def close(self) -> None:
        self._live.clear()
