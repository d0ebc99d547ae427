"""Training the `dl2` policy: imitation of an existing simulator policy, then actor-critic RL in the simulator.

1. Imitation. The teacher (any elastic policy of CLUSTER_POLICIES: drf, optimus, tiresias, ...) runs every training
   workload in the simulator; its rounds are recorded, split (seeded) into training and held-out rounds, and
   turned into decisions (coach.dl2.imitation). The network learns the teacher's decisions
   (cross-entropy) and its critic the discounted reward the teacher got from each round on.
2. Reinforcement learning (advantage actor-critic, as DL2). Each episode replays a run of consecutive jobs of one
   training workload (arrivals shifted to start at 0) for at most `horizon_rounds` rounds; the network samples
   its decisions; the reward of a round is the jobs' progress in it, each job's share of its own work summed over
   jobs (a job that finishes has done all of it). Every decision of a round is credited with the round's
   discounted return minus the critic's value of its state; one gradient pass per episode.

Seeded throughout (initial weights, the rounds held out, the order of minibatches, the episodes and every sampled
action), so the same settings give the same model. A checkpoint (weights, optimiser state, progress, history) is
written to `<out>.ckpt/` every `checkpoint_every` epochs or episodes and at the end of each phase; `resume=True`
carries on from it, to the same result as a run that was never stopped. The model is written to `out` (MXNet
parameters), the imitation-only model beside it (`<stem>-imitation.params`; the initial network when imitation is
skipped) and what was measured to `<stem>.json`, all three at the end and together (training.save_outputs).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
from mxnet import gluon
from threadpoolctl import threadpool_limits

from coach.dl2.checkpoint import CHECKPOINT_VERSION, checkpoint_dir, jsonable, load_checkpoint
from coach.dl2.cluster_policy import decide, grants_of
from coach.dl2.cluster_round import WINDOW, Round, SpeedCache
from coach.dl2.imitation import (
    Agreement,
    allocation_overlap,
    expert_steps,
    order_for,
    targets_of,
)
from coach.dl2.network import HIDDEN, ActorCritic, new_network, numpy_net
from coach.dl2.numpy_net import NumpyNet
from coach.dl2.observation import Observation
from coach.dl2.training import (
    Decisions,
    ProgressCallback,
    action_accuracy,
    actor_critic_pass,
    check_ranges,
    check_state,
    imitation_epochs,
    load_network,
    load_trainer,
    save_checkpoint,
    save_outputs,
)
from coach.domain.cluster import ClusterSpec
from coach.simulator.apps import job_total_progress, load_apps
from coach.simulator.engine import Simulator
from coach.simulator.policies import CLUSTER_POLICIES, teachers
from coach.simulator.session import cluster_from, traces_dir_for
from coach.simulator.view import ClusterSnapshot, Grant
from coach.simulator.workloads import SimJob, WorkloadError, load_workload




@dataclass(frozen=True)
class TrainSettings:
    """Everything a training run depends on (a checkpoint resumes only under the same settings)."""

    imitate: str
    workloads: tuple[str, ...]
    seed: int = 0
    cluster: str = "16x4"
    scheduler: str = "gang"
    interval_s: float = 60.0
    traces: str | None = None
    window: int = WINDOW
    hidden: int = HIDDEN
    # imitation
    rounds_per_workload: int = 240  # teacher rounds sampled per workload (all when fewer)
    held_out: float = 0.2  # share of those rounds kept out of training, to measure agreement on
    imitation_epochs: int = 20
    batch_size: int = 128
    learning_rate: float = 3e-3
    # reinforcement learning
    rl_episodes: int = 100
    episode_jobs: int = 40  # consecutive arrivals of one workload per episode
    horizon_rounds: int = 120  # rounds per episode at most
    rl_learning_rate: float = 2e-3
    gamma: float = 0.5  # discount per round (a round's progress is mostly its own allocation's doing)
    entropy: float = 0.05  # weight of the policy's entropy (exploration; 0.01 let RL undo the imitation)
    value_weight: float = 0.5  # weight of the critic's squared error
    eval_episodes: int = 6  # fixed episodes the greedy policy's reward is measured on
    checkpoint_every: int = 10


@dataclass
class TrainReport:
    out: Path
    settings: TrainSettings
    train_accuracy: float | None  # teacher's decisions taken, on its training rounds
    agreement: Agreement | None  # on the held-out rounds
    reward_start: float | None  # mean greedy reward per evaluation episode before RL (after imitation)
    reward_end: float | None  # the same after RL
    episode_rewards: list[float] = field(default_factory=list)  # per RL episode (sampled actions)

    def as_dict(self) -> dict:
        return {"out": str(self.out), "settings": asdict(self.settings), "train_accuracy": self.train_accuracy,
                "agreement": asdict(self.agreement) if self.agreement else None, "reward_start": self.reward_start,
                "reward_end": self.reward_end, "episode_rewards": self.episode_rewards}


# ---------------------------------------------------------------------------------------------------------------
# Scenarios: what one simulation replays


@dataclass(frozen=True)
class Scenario:
    jobs: tuple[SimJob, ...]
    apps: Mapping
    totals: Mapping[str, float]
    cluster: ClusterSpec


def load_scenarios(settings: TrainSettings) -> list[Scenario]:
    """One scenario per training workload (files read here; WorkloadError / SimulationInputError when bad)."""
    cluster = cluster_from(settings.cluster)
    per_node = max(node.slots for node in cluster.nodes)
    scenarios = []
    for name in settings.workloads:
        path = Path(name)
        jobs = load_workload(path, seed=settings.seed)
        apps = load_apps(traces_dir_for(path, Path(settings.traces) if settings.traces else None))
        unknown = sorted({job.app for job in jobs} - set(apps))
        if unknown:
            raise WorkloadError(f"{path}: application: no traces for {', '.join(unknown)}")
        totals = {job.name: job_total_progress(job, apps[job.app], per_node) for job in jobs}
        scenarios.append(Scenario(tuple(jobs), apps, totals, cluster))
    return scenarios


def excerpt(scenario: Scenario, start: int, count: int) -> Scenario:
    """`count` consecutive arrivals from index `start`, their arrivals shifted so that the first is at 0."""
    jobs = scenario.jobs[start:start + count]
    first = jobs[0].arrival_s if jobs else 0.0
    shifted = tuple(replace(job, arrival_s=job.arrival_s - first) for job in jobs)
    return Scenario(shifted, scenario.apps, {job.name: scenario.totals[job.name] for job in jobs}, scenario.cluster)


class _Horizon(Exception):
    """Raised by a watched policy to end an episode after its last round."""


class _Watched:
    """A policy wrapper that records every round's snapshot, grants and reward (the jobs' share of their work done
    in it, summed), and ends the simulation after `horizon` rounds."""

    elastic = True

    def __init__(self, horizon: int | None = None):
        self.horizon = horizon
        self.simulator: Simulator | None = None
        self.snapshots: list[ClusterSnapshot] = []
        self.grants: list[Mapping[str, Grant]] = []
        self.rewards: list[float] = []
        self._progress: dict[str, float] = {}

    def _done_share(self) -> dict[str, float]:
        assert self.simulator is not None
        return {name: (run.progress / run.total_progress if run.total_progress > 0 else 1.0)
                for name, run in self.simulator.runs.items()}

    def close_round(self) -> None:
        """Credit the last round with the progress made since it was decided."""
        if len(self.rewards) < len(self.snapshots):
            now = self._done_share()
            self.rewards.append(sum(now[name] - self._progress.get(name, 0.0) for name in now))
            self._progress = now

    def allocate(self, snapshot: ClusterSnapshot) -> Mapping[str, Grant]:
        self.close_round()
        if self.horizon is not None and len(self.snapshots) >= self.horizon:
            raise _Horizon
        if not self._progress:
            self._progress = self._done_share()
        grants = self.decide(snapshot)
        self.snapshots.append(snapshot)
        self.grants.append(grants)
        return grants

    def decide(self, snapshot: ClusterSnapshot) -> Mapping[str, Grant]:
        raise NotImplementedError


class _Teacher(_Watched):
    def __init__(self, teacher, horizon: int | None = None):
        super().__init__(horizon)
        self.teacher = teacher

    def decide(self, snapshot: ClusterSnapshot) -> Mapping[str, Grant]:
        return self.teacher.allocate(snapshot)


class _Sampler(_Watched):
    """The network acting: sampled decisions (training) or greedy ones (evaluation); every decision recorded."""

    def __init__(self, net: NumpyNet, rng: np.random.Generator | None, window: int, horizon: int | None):
        super().__init__(horizon)
        self.net = net
        self.rng = rng
        self.window = window
        self.speeds: SpeedCache = {}
        self.steps: list[tuple[Observation, int, int]] = []  # (state, action, round index)

    def decide(self, snapshot: ClusterSnapshot) -> Mapping[str, Grant]:
        round_ = Round(snapshot, self.speeds, self.window)
        if self.rng is None:
            return grants_of(round_, decide(self.net, round_))
        given = np.zeros(len(round_.jobs), dtype=np.int64)
        while round_.free(given) > 0:
            observation = round_.observe(given)
            action = self.net.sample(observation, self.rng)
            self.steps.append((observation, action, len(self.snapshots)))
            if action == observation.stop:
                break
            given[action] += 1
        return grants_of(round_, given)


def simulate_watched(scenario: Scenario, policy: _Watched, settings: TrainSettings) -> _Watched:
    simulator = Simulator(scenario.jobs, scenario.apps, scenario.totals, scenario.cluster, policy, settings.scheduler,
                          settings.interval_s, settings.seed)
    policy.simulator = simulator
    try:
        simulator.run()
    except _Horizon:
        pass
    policy.close_round()
    return policy


def discounted(rewards: Sequence[float], gamma: float) -> np.ndarray:
    returns = np.zeros(len(rewards))
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = rewards[t] + gamma * running
        returns[t] = running
    return returns


# ---------------------------------------------------------------------------------------------------------------
# Imitation


def teacher_decisions(settings: TrainSettings, scenarios: Sequence[Scenario]) -> tuple[Decisions, Decisions]:
    """(training, held-out) decisions of the teacher over every scenario."""
    factory = CLUSTER_POLICIES[settings.imitate]
    order = order_for(settings.imitate)
    train, held = Decisions(), Decisions()
    rng = np.random.default_rng([settings.seed, 0])
    for scenario in scenarios:
        watched = simulate_watched(scenario, _Teacher(factory(settings.seed)), settings)
        returns = discounted(watched.rewards, settings.gamma)
        count = len(watched.snapshots)
        chosen = np.sort(rng.permutation(count)[:settings.rounds_per_workload])
        held_count = int(round(len(chosen) * settings.held_out))
        held_set = set(rng.permutation(chosen)[:held_count].tolist())
        speeds: SpeedCache = {}
        for index in chosen.tolist():
            snapshot = watched.snapshots[index]
            if not snapshot.jobs:
                continue
            round_ = Round(snapshot, speeds, settings.window)
            targets = targets_of(round_, watched.grants[index])
            into = held if index in held_set else train
            into.rounds.append((round_, targets))
            for observation, action in expert_steps(round_, targets, order):
                into.observations.append(observation)
                into.actions.append(action)
                into.returns.append(float(returns[index]))
    return train, held










def agreement(net: ActorCritic, decisions: Decisions) -> Agreement:
    """Teacher-forced action agreement and whole-round (greedy rollout) agreement on `decisions`."""
    fast = numpy_net(net)
    same_gpus = larger = exact = 0
    for round_, targets in decisions.rounds:
        given = decide(fast, round_)
        agree, most = allocation_overlap(given, targets)
        same_gpus, larger = same_gpus + agree, larger + most
        exact += int(np.array_equal(given, targets))
    count = len(decisions.rounds)
    return Agreement(action_accuracy(net, decisions), same_gpus / larger if larger else 1.0,
                     exact / count if count else math.nan, len(decisions.actions), count)






# ---------------------------------------------------------------------------------------------------------------
# Reinforcement learning


def episode_scenario(settings: TrainSettings, scenarios: Sequence[Scenario], rng: np.random.Generator) -> Scenario:
    scenario = scenarios[int(rng.integers(len(scenarios)))]
    count = min(settings.episode_jobs, len(scenario.jobs))
    start = int(rng.integers(len(scenario.jobs) - count + 1))
    return excerpt(scenario, start, count)


def evaluation_scenarios(settings: TrainSettings, scenarios: Sequence[Scenario]) -> list[Scenario]:
    """Fixed episodes (their own seed) on which the greedy policy's reward is compared before and after RL."""
    rng = np.random.default_rng([settings.seed, 2])
    return [episode_scenario(settings, scenarios, rng) for _ in range(settings.eval_episodes)]


def greedy_reward(net: ActorCritic, settings: TrainSettings, scenarios: Sequence[Scenario]) -> float:
    """Mean reward per episode of the greedy policy (the sum of its rounds' rewards within the horizon)."""
    fast = numpy_net(net)
    totals = [sum(simulate_watched(s, _Sampler(fast, None, settings.window, settings.horizon_rounds),
                                   settings).rewards) for s in scenarios]
    return float(np.mean(totals)) if totals else math.nan


def rl_episode(net: ActorCritic, trainer: gluon.Trainer, settings: TrainSettings, scenarios: Sequence[Scenario],
               episode: int) -> float:
    """One sampled episode and one actor-critic pass over its decisions; the episode's total reward."""
    rng = np.random.default_rng([settings.seed, 3, episode])
    scenario = episode_scenario(settings, scenarios, rng)
    sampler = simulate_watched(scenario, _Sampler(numpy_net(net), rng, settings.window, settings.horizon_rounds),
                               settings)
    assert isinstance(sampler, _Sampler)
    if sampler.steps:
        actor_critic_pass(net, trainer, sampler.steps, discounted(sampler.rewards, settings.gamma), settings)
    return float(sum(sampler.rewards))




# ---------------------------------------------------------------------------------------------------------------
# Checkpoints












# ---------------------------------------------------------------------------------------------------------------
# The whole run


def train(imitate: str, workloads: Sequence[Path | str], out: Path, seed: int = 0, *, cluster: str = "16x4",
          traces: Path | None = None, resume: bool = False, on_progress: ProgressCallback | None = None,
          **options) -> TrainReport:
    """Imitate `imitate` on `workloads`, then RL; the model at `out`. `options`: any other TrainSettings field
    (imitation_epochs=0 skips imitation, rl_episodes=0 skips RL). With `resume`, continue from `<out>.ckpt/` when
    it exists (same settings); without it an existing checkpoint is started over.

    ValueError (an unknown or rigid `imitate`, a checkpoint of other settings), WorkloadError or
    SimulationInputError (bad inputs), each one line."""
    # absolute paths: a checkpoint resumes from any current folder
    settings = TrainSettings(imitate=imitate, workloads=tuple(str(Path(w).resolve()) for w in workloads), seed=seed,
                             cluster=cluster,
                             traces=str(traces) if traces is not None else None, **options)
    with threadpool_limits(limits=1):  # tiny numpy calls: OpenBLAS threads only spin (see session.simulate)
        return _train(settings, Path(out), resume, on_progress or (lambda *_: None))


_AT_LEAST = {"window": 1, "hidden": 1, "rounds_per_workload": 1, "imitation_epochs": 0, "batch_size": 1,
             "rl_episodes": 0, "episode_jobs": 1, "horizon_rounds": 1, "eval_episodes": 1, "checkpoint_every": 1}


def _check(settings: TrainSettings) -> None:
    """One ValueError line for the first setting out of range (the CLI's argparse checks the same first)."""
    if not settings.workloads:
        raise ValueError("--workloads: at least one workload file")
    check_ranges(settings, _AT_LEAST, positive=("learning_rate", "rl_learning_rate"))




#: state.json's keys beside version, settings, phase and done, and their kinds (coach.dl2.training.check_state)
STATE_KINDS = {"imitation_losses": "numbers", "train_accuracy": "number?", "agreement": "figures?",
               "reward_start": "number?", "episode_rewards": "numbers"}


def _check_state(state: dict, path: Path, settings: TrainSettings) -> None:
    """ValueError (one line naming the file) for a checkpoint's state this trainer did not write."""
    check_state(state, path, {"imitation": settings.imitation_epochs, "rl": settings.rl_episodes}, STATE_KINDS)
    wanted = {f.name for f in fields(Agreement)}
    if state["agreement"] is not None and set(state["agreement"]) != wanted:
        raise ValueError(f"{path}: agreement: expected the keys {', '.join(sorted(wanted))}")


def _train(settings: TrainSettings, out: Path, resume: bool, on_progress: ProgressCallback) -> TrainReport:
    allowed = teachers()
    if settings.imitate not in allowed:
        why = "is learned itself" if getattr(CLUSTER_POLICIES.get(settings.imitate), "learned", False) else \
            "is not elastic (it is asked only about waiting jobs, so its rounds are not whole allocations)" \
            if settings.imitate in CLUSTER_POLICIES else "unknown policy"
        raise ValueError(f"--imitate: {settings.imitate!r} {why}; expected one of {', '.join(allowed)}")
    _check(settings)
    folder = checkpoint_dir(out)
    state = load_checkpoint(folder, settings) if resume else None
    net = new_network(settings.seed, settings.hidden)
    if state is not None:
        _check_state(state, folder / "state.json", settings)
        load_network(net, folder / "net.params")
    else:
        state = {"version": CHECKPOINT_VERSION, "settings": {k: jsonable(v) for k, v in asdict(settings).items()},
                 "phase": "imitation", "done": 0, "imitation_losses": [], "train_accuracy": None,
                 "agreement": None, "reward_start": None, "episode_rewards": []}
    scenarios = load_scenarios(settings)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = TrainReport(out, settings, None, None, None, None)

    if state["phase"] == "imitation":
        trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": settings.learning_rate})
        if state["done"]:
            load_trainer(trainer, folder / "trainer.states")
        if settings.imitation_epochs > 0:
            train_set, held_set = teacher_decisions(settings, scenarios)
            imitation_epochs(net, trainer, train_set, settings, state, folder, on_progress)
            state["train_accuracy"] = action_accuracy(net, train_set)
            state["agreement"] = asdict(agreement(net, held_set))
        state["phase"], state["done"] = "rl", 0
        save_checkpoint(folder, net, trainer, state, imitation=True)

    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": settings.rl_learning_rate})
    if state["done"]:  # the optimiser's moments too, so that a resumed run goes on exactly as an unbroken one
        load_trainer(trainer, folder / "trainer.states")
    evaluation = evaluation_scenarios(settings, scenarios)
    if settings.rl_episodes > 0 and state["reward_start"] is None:
        state["reward_start"] = greedy_reward(net, settings, evaluation)
    for episode in range(state["done"], settings.rl_episodes):
        reward = rl_episode(net, trainer, settings, scenarios, episode)
        state["episode_rewards"].append(reward)
        state["done"] = episode + 1
        on_progress("rl", episode + 1, settings.rl_episodes, {"reward": reward})
        if (episode + 1) % settings.checkpoint_every == 0:
            save_checkpoint(folder, net, trainer, state)
    report.reward_start = state["reward_start"]
    report.reward_end = greedy_reward(net, settings, evaluation) if settings.rl_episodes > 0 else None
    report.train_accuracy = state["train_accuracy"]
    report.agreement = Agreement(**state["agreement"]) if state["agreement"] else None
    report.episode_rewards = list(state["episode_rewards"])
    save_outputs(out, net, json.dumps(report.as_dict(), indent=1), folder)
    return report
