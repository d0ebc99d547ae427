"""What both DL2 trainers share: the gradient steps (imitation, advantage actor-critic), the checkpoints a training
resumes from, and the range checks of their settings.

coach.dl2.learn_cluster trains the cluster simulator's network and coach.dl2.learn_run the network of Coach's own
jobs; they differ in the episodes they play, not in how a batch of decisions updates the network or how a stopped
run carries on. Side effects: checkpoints and model files written where the caller says.
"""

from __future__ import annotations

import json
import math
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from coach.dl2 import imitation_model, report_file
from coach.dl2.checkpoint import IMITATION
from coach.dl2.network import ActorCritic
from coach.dl2.params_file import MAX_MODEL_BYTES
from coach.dl2.observation import Observation, pad, padded_action
from coach.inputs.limits import read_capped

#: (phase, done, total, metrics of the last step): what a progress bar shows
ProgressCallback = Callable[[str, int, int, Mapping[str, float]], None]


@dataclass
class Decisions:
    """Teacher-forced decisions: states, the teacher's actions, the value targets, and per round the round itself
    (a cluster_round.Round or a run_round.CountsRound) and the teacher's targets in it (for rollouts)."""

    observations: list[Observation] = field(default_factory=list)
    actions: list[int] = field(default_factory=list)
    returns: list[float] = field(default_factory=list)
    rounds: list[tuple[Any, np.ndarray]] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------------------------
# Gradient steps


def batch(observations: Sequence[Observation], actions: Sequence[int]):
    """NDArrays of padded observations and their actions' columns (one round type per batch)."""
    jobs, globs, present, mask = pad(list(observations))
    width = jobs.shape[1]
    columns = [padded_action(a, o, width) for o, a in zip(observations, actions)]
    return (mx.nd.array(jobs), mx.nd.array(globs), mx.nd.array(present), mx.nd.array(mask),
            mx.nd.array(np.array(columns, dtype=np.float32)))


def imitation_step(net: ActorCritic, trainer: gluon.Trainer, observations: Sequence[Observation],
                   actions: Sequence[int], returns: Sequence[float], value_weight: float) -> float:
    """One gradient step towards the teacher's actions (cross-entropy) and its returns (the critic); the loss."""
    jobs, globs, present, mask, picked = batch(observations, actions)
    targets = mx.nd.array(np.asarray(returns, dtype=np.float32))
    with autograd.record():
        logits, values = net(jobs, globs, present, mask)
        chosen = mx.nd.pick(mx.nd.log_softmax(logits, axis=1), picked, axis=1)
        loss = -chosen.mean() + value_weight * ((values - targets) ** 2).mean()
    loss.backward()
    trainer.step(1)
    return float(loss.asscalar())


def actor_critic_step(net: ActorCritic, trainer: gluon.Trainer, observations: Sequence[Observation],
                      actions: Sequence[int], returns: Sequence[float], value_weight: float, entropy: float) -> None:
    """One advantage actor-critic step over sampled decisions (advantages normalised, an entropy bonus)."""
    jobs, globs, present, mask, picked = batch(observations, actions)
    targets = mx.nd.array(np.asarray(returns, dtype=np.float32))
    with autograd.record():
        logits, values = net(jobs, globs, present, mask)
        log_p = mx.nd.log_softmax(logits, axis=1)
        advantage = (targets - values).detach()
        advantage = (advantage - advantage.mean()) / (mx.nd.sqrt(((advantage - advantage.mean()) ** 2).mean())
                                                      + 1e-6)
        spread = -(mx.nd.exp(log_p) * log_p).sum(axis=1)
        loss = (-(mx.nd.pick(log_p, picked, axis=1) * advantage).mean()
                + value_weight * ((values - targets) ** 2).mean() - entropy * spread.mean())
    loss.backward()
    trainer.step(1)


def action_accuracy(net: ActorCritic, decisions: Decisions, batch_size: int = 512) -> float:
    """Share of the decisions where the network's most likely action is the teacher's."""
    if not decisions.actions:
        return math.nan
    hits = 0
    for start in range(0, len(decisions.actions), batch_size):
        stop = start + batch_size
        jobs, globs, present, mask, actions = batch(decisions.observations[start:stop], decisions.actions[start:stop])
        logits, _ = net(jobs, globs, present, mask)
        hits += int((logits.argmax(axis=1) == actions).sum().asscalar())
    return hits / len(decisions.actions)


def imitation_epoch(net: ActorCritic, trainer: gluon.Trainer, decisions: Decisions, settings, epoch: int) -> float:
    """One pass over the teacher's decisions in a seeded order; the mean loss. `settings` has seed, batch_size and
    value_weight."""
    order = np.random.default_rng([settings.seed, 1, epoch]).permutation(len(decisions.actions))
    total, count = 0.0, 0
    for start in range(0, len(order), settings.batch_size):
        picked = order[start:start + settings.batch_size].tolist()
        loss = imitation_step(net, trainer, [decisions.observations[i] for i in picked],
                              [decisions.actions[i] for i in picked], [decisions.returns[i] for i in picked],
                              settings.value_weight)
        total += loss * len(picked)
        count += len(picked)
    return total / max(count, 1)


def imitation_epochs(net: ActorCritic, trainer: gluon.Trainer, decisions: Decisions, settings, state: dict,
                     folder: Path, on_progress: ProgressCallback) -> None:
    """The imitation epochs from `state["done"]` on (a checkpoint every `checkpoint_every`); `settings` has seed,
    batch_size, value_weight, imitation_epochs and checkpoint_every."""
    for epoch in range(state["done"], settings.imitation_epochs):
        loss = imitation_epoch(net, trainer, decisions, settings, epoch)
        state["imitation_losses"].append(loss)
        state["done"] = epoch + 1
        on_progress("imitation", epoch + 1, settings.imitation_epochs, {"loss": loss})
        if (epoch + 1) % settings.checkpoint_every == 0 and epoch + 1 < settings.imitation_epochs:
            save_checkpoint(folder, net, trainer, state)


def actor_critic_pass(net: ActorCritic, trainer: gluon.Trainer, steps: Sequence[tuple[Observation, int, int]],
                      returns: Sequence[float], settings, chunk: int = 1024) -> None:
    """Actor-critic steps over an episode's sampled (state, action, round index) decisions, each credited with its
    round's return, `chunk` decisions at a time; `settings` has value_weight and entropy."""
    observations = [o for o, _, _ in steps]
    actions = [a for _, a, _ in steps]
    step_returns = np.array([returns[r] for _, _, r in steps], dtype=np.float32)
    for start in range(0, len(actions), chunk):
        stop = start + chunk
        actor_critic_step(net, trainer, observations[start:stop], actions[start:stop], step_returns[start:stop],
                          settings.value_weight, settings.entropy)


# ---------------------------------------------------------------------------------------------------------------
# Checkpoints


def atomic_write(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


@contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block is done, then act as before: files that belong together are renamed
    all or none. Python's handlers, not the signal mask: a signal MXNet's threads receive still reaches the main
    thread's handler."""
    caught: list[int] = []
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(signum) not in (signal.SIG_IGN, None):
                previous[signum] = signal.signal(signum, lambda number, _frame: caught.append(number))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if caught:
            signal.raise_signal(caught[0])


def save_checkpoint(folder: Path, net: ActorCritic, trainer: gluon.Trainer, state: dict,
                    imitation: bool = False) -> None:
    """The checkpoint in `folder` (and, with `imitation`, the network as the imitation's), whole or not at all."""
    folder.mkdir(parents=True, exist_ok=True)
    with signals_held():
        if imitation:
            save_network(net, folder / IMITATION)
        save_network(net, folder / "net.params")
        save_trainer(trainer, folder / "trainer.states")
        atomic_write(folder / "state.json", json.dumps(state, indent=1))  # last: names a complete checkpoint


def save_outputs(out: Path, net: ActorCritic, report: str, folder: Path) -> None:
    """The model at `out`, its report (`<stem>.json`) and its imitation twin (the checkpoint's), each written under
    a temporary name and then renamed together: an earlier set at `out` is replaced whole, never mixed with this
    run's. A checkpoint of an older Coach has no imitation network (it wrote the twin itself): the twin stays."""
    staged: dict[Path, Path] = {}
    try:
        twin = folder / IMITATION
        if twin.is_file():
            staged[imitation_model(out)] = _temporary(imitation_model(out))
            staged[imitation_model(out)].write_bytes(read_capped(twin, MAX_MODEL_BYTES))
        staged[report_file(out)] = _temporary(report_file(out))
        staged[report_file(out)].write_text(report)
        staged[out] = _temporary(out)
        net.save_parameters(str(staged[out]))
        with signals_held():
            for final, temporary in staged.items():
                os.replace(temporary, final)
    finally:
        for temporary in staged.values():
            temporary.unlink(missing_ok=True)


def _temporary(path: Path) -> Path:
    """A hidden name beside `path`, of this process: where it is written before it is renamed to `path`."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def save_network(net: ActorCritic, path: Path) -> None:
    """The network's parameters at `path`, written under a temporary name and renamed: never half a file."""
    temporary = _temporary(path)
    try:
        net.save_parameters(str(temporary))
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def load_network(net: ActorCritic, path: Path) -> None:
    """Parameters written by `save_network` into `net`; ValueError (one line naming the file) for anything else: a
    file that is not MXNet's, or one of another network's shapes."""
    try:
        net.load_parameters(str(path), ctx=mx.cpu())
    except (mx.base.MXNetError, AssertionError, ValueError, KeyError, OSError) as error:
        raise ValueError(f"{path}: (file): not this training's network ({_why(error)})") from None


def _why(error: Exception) -> str:
    """A short reason: MXNet's errors carry a C++ stack (and the word Traceback), so they get a sentence instead."""
    if isinstance(error, mx.base.MXNetError):
        return "MXNet cannot read it as saved arrays"
    first = " ".join(str(error).split())
    return (first[:120] + ("..." if len(first) > 120 else "")) or type(error).__name__


#: The optimiser's state is stored as MXNet arrays (mx.nd.save: plain tensors, no code), never pickled: MXNet's own
#: Trainer.save_states pickles the optimiser, and unpickling a file in a folder someone else could write runs code.
#: Keys: "state:<param>:<k>" (the k-th array of the parameter's state), "count:<param>", "num_update".
def save_trainer(trainer: gluon.Trainer, path: Path) -> None:
    """The optimiser's moments and update counts at `path` (mx.nd.save, under a temporary name, then renamed)."""
    updater, optimizer = _updater(trainer)
    arrays = {"num_update": mx.nd.array([optimizer.num_update], dtype="int64")}
    for index, state in updater.states.items():
        parts = state if isinstance(state, (tuple, list)) else (state,)
        for k, part in enumerate(parts):
            if not isinstance(part, mx.nd.NDArray):
                raise TypeError(f"optimiser state of parameter {index}: {type(part).__name__}, expected NDArrays")
            arrays[f"state:{index}:{k}"] = part
    for index, count in optimizer._index_update_count.items():
        arrays[f"count:{index}"] = mx.nd.array([count], dtype="int64")
    temporary = _temporary(path)
    try:
        mx.nd.save(str(temporary), arrays)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def load_trainer(trainer: gluon.Trainer, path: Path) -> None:
    """What `save_trainer` wrote, into `trainer` (whose network is loaded); ValueError (one line naming the file)
    for a file that is not MXNet arrays, or whose arrays do not fit the network's parameters."""
    try:
        arrays = mx.nd.load(str(path))
    except (mx.base.MXNetError, OSError, ValueError) as error:
        raise ValueError(f"{path}: (file): not an optimiser state of coach train-policy ({_why(error)})") from None
    updater, optimizer = _updater(trainer)
    shapes = {index: param.shape for index, param in enumerate(trainer._params)}
    states, counts, num_update = _trainer_arrays(arrays, shapes, path)
    updater.states = {index: parts[0] if len(parts) == 1 else tuple(parts) for index, parts in states.items()}
    updater.states_synced = dict.fromkeys(updater.states, False)
    optimizer._index_update_count.clear()  # in place: the optimiser's per-device table holds this very dict
    optimizer._index_update_count.update(counts)
    optimizer.num_update = num_update


def _updater(trainer: gluon.Trainer):
    """The trainer's single updater and its optimiser (one CPU context, no kvstore: how the trainers run)."""
    if not trainer._kv_initialized:
        trainer._init_kvstore()
    if trainer._params_to_init:
        trainer._init_params()
    if trainer._update_on_kvstore or len(trainer._updaters) != 1:
        raise TypeError("save_trainer/load_trainer: expected one updater and no kvstore")
    return trainer._updaters[0], trainer._updaters[0].optimizer


def _trainer_arrays(arrays, shapes: Mapping[int, tuple], path: Path) -> tuple[dict, dict, int]:
    """(states by parameter, update counts by parameter, num_update) from save_trainer's arrays; ValueError naming
    the file for a key, shape or count that this network's parameters do not have."""
    def wrong(what: str) -> ValueError:
        return ValueError(f"{path}: (file): not an optimiser state of this network ({what})")

    if not isinstance(arrays, dict) or "num_update" not in arrays:
        raise wrong("no num_update")
    states: dict[int, list] = {}
    counts: dict[int, int] = {}
    for key, array in sorted(arrays.items()):
        kind, _, rest = key.partition(":")
        index_text, _, part = rest.partition(":")
        index = int(index_text) if index_text.isdigit() and len(index_text) < 7 else -1
        if kind == "state" and index in shapes and part.isdigit() and array.shape == shapes[index]                 and array.dtype == np.float32 and int(part) == len(states.get(index, [])):
            states.setdefault(index, []).append(array)
        elif kind in ("count", "num_update") and array.shape == (1,) and array.dtype == np.int64                 and 0 <= int(array.asscalar()) <= 2**40 and (kind == "num_update" or index in shapes):
            counts[index] = int(array.asscalar())
        else:
            raise wrong(f"array {key[:40]!r}")
    return states, {i: c for i, c in counts.items() if i >= 0}, counts[-1]


#: What a checkpoint's state.json may hold beside version, settings, phase and done, by kind of value: "numbers" a
#: list of numbers, "number?" a number or null, "figures" / "figures?" an object of numbers (or null), "nested" an
#: object of such objects, "figure-list" a list of them, "text" a string. A trainer names its keys and their kinds.
_KINDS: dict[str, Callable[[Any], bool]] = {}
_KIND_NAMES = {"numbers": "a list of numbers", "number?": "a number or null", "figures": "an object of numbers",
               "figures?": "an object of numbers or null", "nested": "an object of objects of numbers",
               "figure-list": "a list of objects of numbers", "text": "a string"}


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_figures(value) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and (v is None or _is_number(v)) for k, v in value.items())


_KINDS.update({
    "numbers": lambda v: isinstance(v, list) and all(_is_number(x) for x in v),
    "number?": lambda v: v is None or _is_number(v),
    "figures": _is_figures,
    "figures?": lambda v: v is None or _is_figures(v),
    "nested": lambda v: isinstance(v, dict) and all(_is_figures(x) for x in v.values()),
    "figure-list": lambda v: isinstance(v, list) and all(_is_figures(x) for x in v),
    "text": lambda v: isinstance(v, str),
})


def check_state(state: dict, path: Path, totals: Mapping[str, int], kinds: Mapping[str, str],
                optional: Sequence[str] = ()) -> dict:
    """`state` (a loaded checkpoint's) when its values are what the trainer writes, else ValueError naming the file
    and the key: a phase of `totals` whose `done` is a whole number in [0, total], and every key of `kinds` present
    (those of `optional` may be absent) with a value of its kind (_KINDS). Nothing of a checked state can make the
    training raise later or skip its work."""
    phase, done = state.get("phase"), state.get("done")
    if phase not in totals:
        raise ValueError(f"{path}: phase: {short_repr(phase)}, expected one of {', '.join(totals)}")
    if not isinstance(done, int) or isinstance(done, bool) or not 0 <= done <= totals[phase]:
        raise ValueError(f"{path}: done: {short_repr(done)}, expected a whole number from 0 to {totals[phase]} "
                         f"(the {phase} phase's total)")
    for key, kind in kinds.items():
        if key not in state and key in optional:
            continue
        if key not in state or not _KINDS[kind](state[key]):
            raise ValueError(f"{path}: {key}: {short_repr(state.get(key))}, expected {_KIND_NAMES[kind]}")
    return state


def short_repr(value) -> str:
    text = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ---------------------------------------------------------------------------------------------------------------
# Settings


def check_ranges(settings, at_least: Mapping[str, int], positive: Sequence[str],
                 unit: Sequence[str] = ("held_out", "gamma"), non_negative: Sequence[str] = ("entropy", "value_weight")
                 ) -> None:
    """One ValueError line for the first setting out of its range: whole numbers at least `at_least[name]`,
    finite numbers > 0 (`positive`), in [0, 1) (`unit`) or finite and >= 0 (`non_negative`)."""
    for name, low in at_least.items():
        value = getattr(settings, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{name}: expected a whole number >= {low}, got {value!r}")
    for name in positive:
        if not 0 < getattr(settings, name) < math.inf:
            raise ValueError(f"{name}: expected a finite number > 0, got {getattr(settings, name)!r}")
    for name in unit:
        if not 0 <= getattr(settings, name) < 1:
            raise ValueError(f"{name}: expected a number in [0, 1), got {getattr(settings, name)!r}")
    for name in non_negative:
        if not 0 <= getattr(settings, name) < math.inf:
            raise ValueError(f"{name}: expected a finite number >= 0, got {getattr(settings, name)!r}")
