"""The epoch request and reply between the controller and `functions/`: typed, versioned, checked on both sides.

The controller builds an `EpochRequest` and sends `to_dict()`; a function rebuilds it with `from_dict`, which
raises `ContractError` naming the first bad field, in the order `to_dict()` writes them (the function answers
400 with that line). Requests are strict: an unknown field is an error, so a misspelt optional field (`seed`)
cannot silently fall back to its default. Replies are lenient about extra fields, because the runtime adds
`wall_s` and `role` and benchmarks add their own. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, Mapping, overload

from coach.domain.identity import ROLES as _ROLES

SCHEMA = 1  # bump on any incompatible change; both sides refuse another version
ROLES = tuple(role.value for role in _ROLES)  # as JSON strings; one definition: coach.domain.identity
#: The run's token: a function refuses (401) every request whose TOKEN_HEADER is not the token in its TOKEN_ENV,
#: which its spec sets on Nuclio and Coach's host sets locally; never on a command line, never in a reply or a log.
TOKEN_HEADER = "X-Coach-Token"
TOKEN_ENV = "COACH_FUNCTION_TOKEN"
_LEARNING_RATE_KEYS = ("learning_rate", "lr")  # set by Hyper.learning_rate alone
_REQUEST_KEYS = ("schema", "job", "epoch", "step", "attempt", "role", "ps", "model", "data", "hyper", "checkpoint",
                 "deadline_s", "rendezvous_id", "next")  # EpochRequest's JSON keys, in the order from_dict checks them


_NOISE_FIELDS = ("grad_var", "grad_sqr", "noise_steps")  # WorkerReply's optional noise-scale measurement


def _flat(value: Any) -> dict[str, Any]:
    """A flat dataclass as a dict: `asdict` deep-copies every field, which virtual-time runs pay per reply."""
    return {f.name: getattr(value, f.name) for f in fields(value)}


class ContractError(ValueError):
    """A request or reply that does not match the contract; the message names the field."""

    def __init__(self, field_name: str, problem: str):
        super().__init__(f"{field_name}: {problem}")
        self.field = field_name
        self.problem = problem


# --------------------------------------------------------------------------- checking one field


def _kind_name(kinds: tuple[type, ...]) -> str:
    if set(kinds) == {int, float}:
        return "a number"
    return " or ".join({int: "an integer", float: "a number", str: "a string", dict: "an object",
                        bool: "a boolean"}.get(k, k.__name__) for k in kinds)


def _get(data: Mapping[str, Any], key: str, where: str, kind: type | tuple[type, ...], optional: bool = False) -> Any:
    """The value of `key`, of one of the JSON types `kind`; bool is never a number and floats must be finite."""
    name = f"{where}{key}"
    if key not in data or data[key] is None:
        if optional:
            return None
        raise ContractError(name, "required")
    value = data[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
        raise ContractError(name, f"expected {_kind_name(kinds)}, got bool")
    if not isinstance(value, kinds):
        raise ContractError(name, f"expected {_kind_name(kinds)}, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ContractError(name, f"must be finite, got {value}")
    return value


@overload
def _int(data: Mapping[str, Any], key: str, where: str, minimum: int | None = None,
         optional: Literal[False] = False) -> int: ...
@overload
def _int(data: Mapping[str, Any], key: str, where: str, minimum: int | None = None,
         optional: bool = False) -> int | None: ...
def _int(data: Mapping[str, Any], key: str, where: str, minimum: int | None = None,
         optional: bool = False) -> int | None:
    value: int | None = _get(data, key, where, int, optional)
    if value is not None and minimum is not None and value < minimum:
        raise ContractError(f"{where}{key}", f"must be >= {minimum}, got {value}")
    return value


@overload
def _number(data: Mapping[str, Any], key: str, where: str, optional: Literal[False] = False) -> float: ...
@overload
def _number(data: Mapping[str, Any], key: str, where: str, optional: bool = False) -> float | None: ...
def _number(data: Mapping[str, Any], key: str, where: str, optional: bool = False) -> float | None:
    value = _get(data, key, where, (int, float), optional)
    return None if value is None else float(value)


@overload
def _text(data: Mapping[str, Any], key: str, where: str, optional: Literal[False] = False) -> str: ...
@overload
def _text(data: Mapping[str, Any], key: str, where: str, optional: bool = False) -> str | None: ...
def _text(data: Mapping[str, Any], key: str, where: str, optional: bool = False) -> str | None:
    """A non-empty string: an empty path or address is a controller bug, not a value."""
    value: str | None = _get(data, key, where, str, optional)
    if value == "":
        raise ContractError(f"{where}{key}", "must not be empty")
    return value


def _mapping(data: Mapping[str, Any], key: str, where: str = "") -> Mapping[str, Any]:
    value: Mapping[str, Any] = _get(data, key, where, dict)
    return value


def _only(data: Mapping[str, Any], allowed: tuple[str, ...], where: str = "") -> None:
    """Refuse fields the contract does not know (requests only)."""
    for key in data:
        if key not in allowed:
            raise ContractError(f"{where}{key}", "unknown field")


def _check_schema(data: Any) -> None:
    if not isinstance(data, Mapping):
        raise ContractError("body", f"expected a JSON object, got {type(data).__name__}")
    if "schema" not in data:  # a body without one is read as this version's (cancel and warm bodies, by hand)
        return
    schema = data["schema"]
    if isinstance(schema, bool) or not isinstance(schema, int) or schema != SCHEMA:
        raise ContractError("schema", f"version {schema!r} is not supported (this side speaks {SCHEMA})")


def _names(cls: type[Any]) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


# --------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class PsAddress:
    """Where the job's ps-lite scheduler listens, and the counts every role must agree on."""

    root_uri: str  # the PS scheduler's address, as the platform gives it
    root_port: int  # its port
    num_servers: int  # servers taking part in this epoch
    num_workers: int  # workers taking part in this epoch
    node_host: str  # the address this function's own node is reached at

    def to_dict(self) -> dict[str, Any]:
        return _flat(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "ps.") -> PsAddress:
        _only(data, _names(cls), where)
        root_uri = _text(data, "root_uri", where)
        port = _int(data, "root_port", where)
        if not 0 < port < 65536:
            raise ContractError(f"{where}root_port", f"must be a TCP port (1..65535), got {port}")
        return cls(root_uri, port, _int(data, "num_servers", where, minimum=1),
                   _int(data, "num_workers", where, minimum=1), _text(data, "node_host", where))


@dataclass(frozen=True)
class NextEpoch:
    """Where the next epoch of the same functions at the same counts will meet, announced ahead so that a spare
    child joins it now (coach_functions/spares.py); that epoch's request carries `id` as its `rendezvous_id`. The id,
    not the address, tells them apart: an address comes back once the epoch announced there has not come."""

    id: str  # unique to this announcement
    ps: PsAddress

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "ps": self.ps.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "next.") -> NextEpoch:
        _only(data, ("id", "ps"), where)
        return cls(_text(data, "id", where), PsAddress.from_dict(_mapping(data, "ps", where), f"{where}ps."))


@dataclass(frozen=True)
class Hyper:
    """Training hyper-parameters of one epoch."""

    batch_size: int  # per-worker mini-batch
    optimizer: str  # MXNet optimizer name
    learning_rate: float
    optimizer_params: Mapping[str, float] = field(default_factory=dict)  # extra optimizer kwargs
    seed: int = 0  # seeds initialisation, sharding and shuffling
    measure_noise: bool = False  # workers measure the gradient noise scale (adaptive batch size)

    def to_dict(self) -> dict[str, Any]:
        out = {**asdict(self), "optimizer_params": dict(self.optimizer_params)}
        if not self.measure_noise:  # written only when asked for: a request without it keeps its earlier shape
            del out["measure_noise"]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "hyper.") -> Hyper:
        _only(data, _names(cls), where)
        batch = _int(data, "batch_size", where, minimum=1)
        optimizer = _text(data, "optimizer", where)
        learning_rate = _number(data, "learning_rate", where)
        if learning_rate <= 0:
            raise ContractError(f"{where}learning_rate", f"must be > 0, got {learning_rate}")
        params = _get(data, "optimizer_params", where, dict, optional=True) or {}
        for key in params:
            if key in _LEARNING_RATE_KEYS:
                raise ContractError(f"{where}optimizer_params.{key}", f"not allowed, {where}learning_rate sets it")
            _get(params, key, f"{where}optimizer_params.", (int, float))
        seed = _int(data, "seed", where, minimum=0, optional=True)
        measure_noise = _get(data, "measure_noise", where, bool, optional=True) is True
        return cls(batch, optimizer, learning_rate, {k: float(v) for k, v in params.items()},
                   0 if seed is None else seed, measure_noise)


@dataclass(frozen=True)
class EpochRequest:
    """One epoch of one role: everything a stateless function needs, nothing it must remember."""

    job: str  # job name
    epoch: int  # 1-based training epoch, 0 for a calibration mini-epoch
    step: int  # calibration mini-epochs and epochs counted together: seeds the shuffling
    attempt: int  # 1 for the first try of this step
    role: str  # "scheduler", "server" or "worker"
    ps: PsAddress  # rendezvous and counts
    model_path: str  # the model file every worker imports
    data_fraction: float  # share of the training data (calibration uses less than 1)
    hyper: Hyper  # training hyper-parameters
    checkpoint_load: str | None  # prefix of the checkpoint to start from; None for the first step
    checkpoint_save: str  # prefix rank 0 saves to
    deadline_s: float  # the function gives up after this long
    # the NextEpoch.id under which this epoch's rendezvous was announced ahead; None: chosen now, no spare joined it
    rendezvous_id: str | None = None
    next: NextEpoch | None = None  # where the next epoch at these functions and counts will meet

    def to_dict(self) -> dict[str, Any]:
        out = {
            "schema": SCHEMA, "job": self.job, "epoch": self.epoch, "step": self.step, "attempt": self.attempt,
            "role": self.role, "ps": self.ps.to_dict(), "model": {"path": self.model_path},
            "data": {"fraction": self.data_fraction}, "hyper": self.hyper.to_dict(),
            "checkpoint": {"load": self.checkpoint_load, "save": self.checkpoint_save},
            "deadline_s": self.deadline_s,
        }
        # written only when set: a request without them keeps its earlier shape
        if self.rendezvous_id is not None:
            out["rendezvous_id"] = self.rendezvous_id
        if self.next is not None:
            out["next"] = self.next.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EpochRequest:
        _check_schema(data)
        _only(data, _REQUEST_KEYS)
        job = _text(data, "job", "")
        epoch = _int(data, "epoch", "", minimum=0)
        step = _int(data, "step", "", minimum=0)
        attempt = _int(data, "attempt", "", minimum=1)
        role = _role(data)
        ps = PsAddress.from_dict(_mapping(data, "ps"))
        model = _mapping(data, "model")
        _only(model, ("path",), "model.")
        model_path = _text(model, "path", "model.")
        shard = _mapping(data, "data")
        _only(shard, ("fraction",), "data.")
        fraction = _number(shard, "fraction", "data.")
        if not 0 < fraction <= 1:
            raise ContractError("data.fraction", f"must be in (0, 1], got {fraction}")
        hyper = Hyper.from_dict(_mapping(data, "hyper"))
        checkpoint = _mapping(data, "checkpoint")
        _only(checkpoint, ("load", "save"), "checkpoint.")
        load = _text(checkpoint, "load", "checkpoint.", optional=True)
        save = _text(checkpoint, "save", "checkpoint.")
        deadline = _number(data, "deadline_s", "")
        if deadline <= 0:
            raise ContractError("deadline_s", f"must be > 0, got {deadline}")
        rendezvous_id = _text(data, "rendezvous_id", "", optional=True)
        following = None
        if data.get("next") is not None:
            following = NextEpoch.from_dict(_mapping(data, "next"))
            if (following.ps.root_uri, following.ps.root_port) == (ps.root_uri, ps.root_port):
                raise ContractError("next.ps.root_port", f"must differ from ps.root_port ({ps.root_port}): both "
                                    f"schedulers listen at once")
            if following.ps.node_host != ps.node_host:  # this function's own node, then as now
                raise ContractError("next.ps.node_host", f"must equal ps.node_host ({ps.node_host!r}), got "
                                    f"{following.ps.node_host!r}")
            if following.id == rendezvous_id:
                raise ContractError("next.id", f"must differ from rendezvous_id ({rendezvous_id!r})")
        return cls(job=job, epoch=epoch, step=step, attempt=attempt, role=role, ps=ps, model_path=model_path,
                   data_fraction=fraction, hyper=hyper, checkpoint_load=load, checkpoint_save=save,
                   deadline_s=deadline, rendezvous_id=rendezvous_id, next=following)


@dataclass(frozen=True)
class WarmRequest:
    """Load the model file and its data now, not inside the first timed epoch; with the job's per-worker batch
    size, also warm MXNet up for its batch shapes (coach_functions/warmup.py), so that calibration measures the warm
    children the epochs will run in."""

    model_path: str
    batch_size: int | None = None

    def to_dict(self) -> dict[str, Any]:
        body = {"schema": SCHEMA, "action": "warm", "model": {"path": self.model_path}}
        return body if self.batch_size is None else {**body, "batch_size": self.batch_size}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WarmRequest:
        _check_action(data, "warm", ("model", "batch_size"))
        model = _mapping(data, "model")
        _only(model, ("path",), "model.")
        return cls(_text(model, "path", "model."), _int(data, "batch_size", "", minimum=1, optional=True))


@dataclass(frozen=True)
class WarmReply:
    """What a warmed worker tells: the size of its training set, so that the job's first calibration step already
    trains whole batches (coach.policy.planning.calibration_fraction) instead of a share of data of unknown size."""

    train_samples: int | None = None  # samples of a full epoch (None: a server, which trains none)

    def to_dict(self) -> dict[str, Any]:
        body = {"schema": SCHEMA, "warm": True}
        return body if self.train_samples is None else {**body, "train_samples": self.train_samples}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WarmReply:
        _check_schema(data)
        return cls(_int(data, "train_samples", "", minimum=1, optional=True))


@dataclass(frozen=True)
class AheadRequest:
    """Where this idle function's next epoch will meet, announced while the job's current step runs on other
    functions (a calibration point that adds a worker or a server): its host's spare joins that ps-lite rendezvous
    now, as the spares of the functions in the current step do through their request's `next`. Nothing is run."""

    role: str  # the function's own role
    next: NextEpoch

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "action": "ahead", "role": self.role, "next": self.next.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AheadRequest:
        _check_action(data, "ahead", ("role", "next"))
        return cls(_role(data), NextEpoch.from_dict(_mapping(data, "next")))


def _check_action(data: Mapping[str, Any], action: str, fields: tuple[str, ...]) -> None:
    """A body of one of the functions' actions: a schema this side speaks, only its fields, and that action."""
    _check_schema(data)
    _only(data, ("schema", "action", *fields))
    if data.get("action") != action:
        raise ContractError("action", f"expected {action!r}, got {data.get('action')!r}")


def _role(data: Mapping[str, Any]) -> str:
    role: str = _get(data, "role", "", str)
    if role not in ROLES:
        raise ContractError("role", f"unknown role {role[:40]!r}, expected one of {', '.join(ROLES)}")
    return role


# --------------------------------------------------------------------------- replies


@dataclass(frozen=True)
class WorkerReply:
    """What one worker reports of its epoch.

    `diverged`: the training loss or the parameters stopped being finite, so the worker stopped training early
    (every worker at the same step). Then `loss_sum` may be None (JSON null; JSON has no NaN) and
    `checkpoint_saved` is None: diverged parameters are never saved. A loss_sum of None is refused otherwise.

    `stopped_early`: the epoch's deadline came before the end of the shard, so every worker left its training loop
    after the same step (coach_functions/deadline.py) and rank 0 validated and saved what they had trained; `samples` of
    `shard_samples` says how much of the epoch that was (none at all: no checkpoint)."""

    rank: int  # 0 .. num_workers - 1
    num_workers: int
    loss_sum: float | None  # sum of per-sample losses; None only when diverged
    samples: int  # samples trained on
    correct: int  # correct predictions while training
    compute_s: float  # time in the training loop
    checkpoint_saved: str | None  # rank 0: the prefix it saved, complete on disk
    val_loss: float | None = None  # rank 0 with validation data: mean loss over the validation set
    val_accuracy: float | None = None
    val_samples: int | None = None  # size of the validation set those two were measured on
    diverged: bool = False  # a non-finite loss or parameters ended training early; nothing was saved
    stopped_early: bool = False  # the deadline came first: every worker left after the same step, rank 0 saved
    shard_samples: int | None = None  # samples a whole pass over this worker's shard trains (None: not told)
    # the first step's time beyond a later step's within compute_s (cold kernels, first shapes): paid once per
    # epoch, so a mini-epoch's scaling to a full epoch must not multiply it (coach/policy/history.py); None: not
    # told, or fewer than two steps to tell it by
    warmup_s: float | None = None
    # with hyper.measure_noise and 2+ workers: unbiased estimates of tr(Sigma) and |G|^2 per sample (grad_var may be
    # negative), averaged over `noise_steps` sampled steps (coach_functions/noise_scale.py)
    grad_var: float | None = None
    grad_sqr: float | None = None
    noise_steps: int | None = None

    def to_dict(self) -> dict[str, Any]:
        mean_loss = self.loss_sum / self.samples if self.samples and self.loss_sum is not None else None
        fields_ = {key: value for key, value in _flat(self).items()
                   if value is not None or key not in _NOISE_FIELDS}  # noise fields only when measured
        return {"schema": SCHEMA, **fields_, "loss": mean_loss,
                "accuracy": self.correct / self.samples if self.samples else None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkerReply:
        _check_schema(data)
        num_workers = _int(data, "num_workers", "", minimum=1)
        rank = _int(data, "rank", "", minimum=0)
        if rank >= num_workers:
            raise ContractError("rank", f"must be below num_workers ({num_workers}), got {rank}")
        samples = _int(data, "samples", "", minimum=0)
        correct = _int(data, "correct", "", minimum=0)
        if correct > samples:
            raise ContractError("correct", f"must be <= samples ({samples}), got {correct}")
        compute_s = _number(data, "compute_s", "")
        if compute_s < 0:
            raise ContractError("compute_s", f"must be >= 0, got {compute_s}")
        diverged = _get(data, "diverged", "", bool, optional=True) is True  # absent: false
        stopped_early = _get(data, "stopped_early", "", bool, optional=True) is True
        shard_samples = _int(data, "shard_samples", "", minimum=1, optional=True)
        warmup_s = _number(data, "warmup_s", "", optional=True)
        if warmup_s is not None and not 0 <= warmup_s <= compute_s:
            raise ContractError("warmup_s", f"must be within 0 .. compute_s ({compute_s}), got {warmup_s}")
        if shard_samples is not None and samples > shard_samples:
            raise ContractError("samples", f"must be <= shard_samples ({shard_samples}), got {samples}")
        if data.get("loss_sum", 0) is None and not diverged:
            raise ContractError("loss_sum", "null is allowed only with diverged: true")
        checkpoint_saved = _text(data, "checkpoint_saved", "", optional=True)
        if diverged and checkpoint_saved is not None:
            raise ContractError("checkpoint_saved", "must be null with diverged: true (diverged parameters are "
                                                    "never saved)")
        return cls(
            rank=rank, num_workers=num_workers, loss_sum=_number(data, "loss_sum", "", optional=diverged),
            samples=samples, correct=correct, compute_s=compute_s, checkpoint_saved=checkpoint_saved,
            val_loss=_number(data, "val_loss", "", optional=True),
            val_accuracy=_number(data, "val_accuracy", "", optional=True),
            val_samples=_int(data, "val_samples", "", minimum=1, optional=True), diverged=diverged,
            stopped_early=stopped_early, shard_samples=shard_samples, warmup_s=warmup_s,
            grad_var=_number(data, "grad_var", "", optional=True),
            grad_sqr=_number(data, "grad_sqr", "", optional=True),
            noise_steps=_int(data, "noise_steps", "", minimum=0, optional=True))


@dataclass(frozen=True)
class PsNodeReply:
    """What a PS scheduler or server reports of its epoch: how long it served."""

    compute_s: float  # time from starting the ps-lite role (a spare's: joining ahead) until the last worker left

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "compute_s": self.compute_s}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PsNodeReply:
        _check_schema(data)
        compute_s = _number(data, "compute_s", "")
        if compute_s < 0:
            raise ContractError("compute_s", f"must be >= 0, got {compute_s}")
        return cls(compute_s)
