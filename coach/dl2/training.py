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
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from coach.dl2.network import ActorCritic
from coach.dl2.observation import Observation, pad, padded_action

CHECKPOINT_VERSION = 1

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


def checkpoint_dir(out: Path) -> Path:
    return out.with_name(out.name + ".ckpt")


def atomic_write(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def save_checkpoint(folder: Path, net: ActorCritic, trainer: gluon.Trainer, state: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    net.save_parameters(str(folder / "net.params.tmp"))
    os.replace(folder / "net.params.tmp", folder / "net.params")
    trainer.save_states(str(folder / "trainer.states.tmp"))
    os.replace(folder / "trainer.states.tmp", folder / "trainer.states")
    atomic_write(folder / "state.json", json.dumps(state, indent=1))  # last: names a complete checkpoint


def load_checkpoint(folder: Path, settings) -> dict | None:
    """The checkpoint's state, None without one; ValueError when it was written by another version or under other
    `settings` (a frozen dataclass: every field must match)."""
    path = folder / "state.json"
    if not path.is_file():
        return None
    state = json.loads(path.read_text())
    if state.get("version") != CHECKPOINT_VERSION:
        raise ValueError(f"{path}: checkpoint version {state.get('version')!r}, expected {CHECKPOINT_VERSION}")
    saved = state.get("settings", {})
    differs = [f.name for f in fields(settings) if jsonable(getattr(settings, f.name)) != saved.get(f.name)]
    if differs:
        raise ValueError(f"{path}: made with other settings ({', '.join(differs)}); resume with the same ones, "
                         f"or delete {folder}")
    return state


def jsonable(value):
    return list(value) if isinstance(value, tuple) else value


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
