"""Training the DL2 network that decides Coach's own jobs (workers and servers), in virtual time.

Episodes are runs of Coach's real lifecycle, `coach run`'s policy interface and scheduler_fork placement over the
virtual platform (coach.app.virtual_run): a seeded mix of 4-10 dynamic jobs started together on a 24-slot cluster,
each with its own speed surface (VirtualJobModel: a compute part that scales with workers at its own efficiency, and a
push/pull part that servers share, as Optimus's model has it), epochs and limits; about one job in four has a
budget that does not cover every epoch.

1. Imitation: the `coach` policy runs the training episodes; every round in which jobs ask for counts becomes the
   decisions that reach the teacher's counts (run_round.teacher_steps); the network learns them (cross-entropy)
   and its critic the return that followed. A seeded fifth of the rounds is held out to measure agreement on.
2. Reinforcement learning (advantage actor-critic): the network samples its actions in new episodes. The reward of
   a round is the jobs' epoch progress until the next round (each job's share of its max_epochs, 1 once ended),
   discounted by `gamma` per `discount_s` of virtual time (rounds come whenever an epoch ends, not at a fixed
   rhythm). Every `select_every` episodes the greedy network runs the fixed validation episodes; the model
   written is the one with the lowest mean JCT there, the imitation network included (RL's updates are noisy:
   a run's last network can be worse than its imitation start).

Seeded throughout and resumable from `<out>.ckpt/` as coach.dl2.learn_cluster (the update steps and checkpoints of
coach.dl2.training). Writes the model to `out`, the imitation-only one beside it and what was measured to
`<stem>.json`, all three at the end and together (training.save_outputs).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
from mxnet import gluon
from threadpoolctl import threadpool_limits

from coach.app.virtual_run import START_S, run_virtual
from coach.dl2 import RUN_MIN_JOBS
from coach.dl2.checkpoint import CHECKPOINT_VERSION, checkpoint_dir, load_checkpoint
from coach.dl2.network import HIDDEN, ActorCritic, new_network, numpy_net
from coach.dl2.numpy_net import NumpyNet
from coach.dl2.observation import Observation
from coach.dl2.run_policy import RUN_TEACHERS, Dl2RunPolicy, asking_round, learns
from coach.dl2.run_round import COUNTS_SHAPE, KINDS, CountsRound, counts_by, teacher_steps
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
    save_network,
    save_outputs,
)
from coach.domain.cluster import ClusterSpec, NodeSpec
from coach.domain.jobs import JobSpec
from coach.platforms.virtual import VirtualJobModel
from coach.policy.run_policy import RunClusterView, CoachPolicy, Counts, Decision, RunJobView

_MODEL = Path("/virtual/model.py")  # never loaded: the virtual platform computes every epoch
PRICE_PER_SLOT_S = 0.0001
EPISODE_LIMIT_S = 3600.0  # virtual seconds after which an episode's jobs are stopped (typical makespans: 50-250 s)


@dataclass(frozen=True)
class CountsTrainSettings:
    """Everything a training run depends on (a checkpoint resumes only under the same settings)."""

    imitate: str = "coach"
    seed: int = 0
    nodes: int = 4
    slots_per_node: int = 6
    min_jobs: int = RUN_MIN_JOBS
    episode_jobs: int = 10  # jobs per episode at most
    hidden: int = HIDDEN
    # imitation
    teacher_episodes: int = 200
    held_out: float = 0.2
    imitation_epochs: int = 20
    batch_size: int = 128
    learning_rate: float = 3e-3
    # reinforcement learning
    rl_episodes: int = 100
    rl_learning_rate: float = 3e-4
    reward: str = "progress"  # a key of REWARDS
    gamma: float = 0.5  # discount per `discount_s` of virtual time
    discount_s: float = 30.0
    entropy: float = 0.01
    value_weight: float = 0.5
    eval_episodes: int = 20
    select_every: int = 250  # RL episodes between evaluations; the network with the lowest mean JCT is kept
    checkpoint_every: int = 10


@dataclass
class CountsReport:
    out: Path
    settings: CountsTrainSettings
    train_accuracy: float | None
    held_out_accuracy: float | None  # the teacher's actions taken on held-out rounds
    held_out_rounds_same: float | None  # held-out rounds whose every job gets the teacher's counts
    evaluation: dict  # mean JCT s, makespan s and reward: teacher, imitation-only, last and kept (final) network
    episode_rewards: list[float] = field(default_factory=list)
    selection: list[dict] = field(default_factory=list)  # every validation during RL

    def as_dict(self) -> dict:
        return {"out": str(self.out), "settings": asdict(self.settings), "train_accuracy": self.train_accuracy,
                "held_out_accuracy": self.held_out_accuracy, "held_out_rounds_same": self.held_out_rounds_same,
                "evaluation": self.evaluation, "selection": self.selection, "episode_rewards": self.episode_rewards}


# ---------------------------------------------------------------------------------------------------------------
# Episodes


@dataclass(frozen=True)
class Episode:
    specs: tuple[JobSpec, ...]
    models: Mapping[str, VirtualJobModel]
    cluster: ClusterSpec


def episode(settings: CountsTrainSettings, rng: np.random.Generator) -> Episode:
    """A seeded mix of dynamic jobs with their own speed surfaces."""
    count = int(rng.integers(settings.min_jobs, settings.episode_jobs + 1))
    cluster = ClusterSpec("train", tuple(NodeSpec(f"node-{i}", settings.slots_per_node, PRICE_PER_SLOT_S)
                                         for i in range(settings.nodes)))
    specs, models = [], {}
    for i in range(count):
        name = f"job-{i:02d}"
        compute_s = float(np.exp(rng.uniform(math.log(1.0), math.log(12.0))))
        model = VirtualJobModel(fixed_s=float(rng.uniform(0.3, 0.6)), compute_s_one_worker=compute_s,
                                worker_efficiency=float(rng.uniform(0.3, 0.95)),
                                server_overhead_s=float(rng.uniform(0.02, 0.1)),
                                server_comm_s=compute_s * float(rng.uniform(0.0, 0.8)))
        epochs = int(rng.integers(4, 17))
        budget = 1e9
        if rng.random() < 0.25:  # money for part of the epochs at one worker and one server
            budget = epochs * model.epoch_s(1, 1, 1.0) * 3 * PRICE_PER_SLOT_S * float(rng.uniform(0.4, 1.2))
        specs.append(JobSpec(name=name, source=_MODEL, model_path=_MODEL, batch_size=64, optimizer="sgd",
                             optimizer_params={}, learning_rate=0.05, target_loss=0.0, consecutive=3,
                             max_epochs=epochs, budget=budget, workers=None, servers=None,
                             max_workers=int(rng.integers(2, 9)), max_servers=int(rng.integers(1, 5)), seed=i,
                             epoch_timeout_s=600.0))
        models[name] = model
    return Episode(tuple(specs), models, cluster)


class _Rounds:
    """Records, at every round with asking jobs, the time, the jobs' progress and how many are unfinished."""

    def __init__(self):
        self.times_s: list[float] = []
        self.progress: list[float] = []
        self.unfinished: list[int] = []
        self.known: dict[str, int] = {}  # job -> max_epochs, of every job seen

    def mark(self, jobs: Sequence[RunJobView], now_s: float) -> None:
        shares = {}
        for job in jobs:
            self.known[job.spec.name] = job.spec.max_epochs
            shares[job.spec.name] = job.history.epochs_done / max(job.spec.max_epochs, 1)
        self.times_s.append(now_s)
        self.progress.append(sum(shares.get(name, 1.0) for name in self.known))  # an ended job: all of it
        self.unfinished.append(len(jobs))

    def rewards(self, end_s: float, kind: str) -> tuple[np.ndarray, np.ndarray]:
        """(reward of every round, seconds to the next round); at the end of the run every job is done."""
        times = np.array(self.times_s + [end_s])
        spans = np.maximum(np.diff(times), 0.0)
        return REWARDS[kind](self, spans), spans

    def returns(self, end_s: float, settings: CountsTrainSettings) -> np.ndarray:
        """Discounted return from every round (`gamma` per `discount_s` of virtual time)."""
        rewards, spans = self.rewards(end_s, settings.reward)
        running, out = 0.0, np.zeros(len(rewards))
        for k in range(len(rewards) - 1, -1, -1):
            running = rewards[k] + settings.gamma ** (spans[k] / settings.discount_s) * running
            out[k] = running
        return out


def _progress_reward(rounds: _Rounds, spans: np.ndarray) -> np.ndarray:
    """DL2's: the jobs' epoch progress until the next round (each job's share of its max_epochs, summed)."""
    progress = np.array(rounds.progress + [float(len(rounds.known))])
    return np.diff(progress)


def _time_reward(rounds: _Rounds, spans: np.ndarray) -> np.ndarray:
    """Minus the job-minutes spent unfinished until the next round: undiscounted, the sum is minus the total JCT."""
    return -np.array(rounds.unfinished, dtype=float) * spans / 60.0


#: what a round's reward is (--reward): DL2's progress, or the time the jobs wait to finish (average JCT)
REWARDS = {"progress": _progress_reward, "jct": _time_reward}


class _Teaching:
    """The `coach` policy deciding, every round's decisions recorded as DL2 steps towards its counts."""

    def __init__(self):
        self.teacher = CoachPolicy()
        self.rounds = _Rounds()
        self.steps: list = []  # (round index, [(state, action)], the round, the teacher's counts per job)

    def check(self, spec: JobSpec) -> str | None:
        return self.teacher.check(spec)

    def calibration(self, spec: JobSpec) -> tuple[tuple[int, int], ...]:
        return self.teacher.calibration(spec)

    def decide(self, cluster: RunClusterView, jobs: Sequence[RunJobView], now_s: float) -> dict[str, Decision]:
        decisions = self.teacher.decide(cluster, jobs, now_s)
        _, _, round_ = asking_round(cluster, jobs)
        if round_ is not None:
            targets = np.array([_counts(decisions.get(job.name)) for job in round_.jobs], dtype=np.int64)
            self.steps.append((len(self.rounds.times_s), teacher_steps(round_, targets), round_, targets))
            self.rounds.mark(jobs, now_s)
        return decisions


def _counts(decision: Decision | None) -> tuple[int, int]:
    return (decision.workers, decision.servers) if isinstance(decision, Counts) and decision.affordable else (0, 0)


class _Sampling(Dl2RunPolicy):
    """The network deciding by sampling (training) or greedily (`rng` None); its rounds and steps recorded."""

    def __init__(self, net: NumpyNet, rng: np.random.Generator | None):
        super().__init__(_net=net)
        self.rng = rng
        self.rounds = _Rounds()
        self.steps: list[tuple[Observation, int, int]] = []  # (state, action, round index)

    def decide(self, cluster: RunClusterView, jobs: Sequence[RunJobView], now_s: float) -> dict[str, Decision]:
        decisions = super().decide(cluster, jobs, now_s)
        if any(learns(job) and job.asking for job in jobs):
            self.rounds.mark(jobs, now_s)
        return decisions

    def choose(self, round_: CountsRound):
        if self.rng is None:
            return super().choose(round_)
        index = len(self.rounds.times_s)

        def sampled(observation: Observation) -> int:
            action = self._net.sample(observation, self.rng)
            self.steps.append((observation, action, index))
            return action

        return counts_by(round_, sampled)


def run_episode(ep: Episode, policy) -> dict:
    """One virtual-time run of the episode under `policy`; its summary."""
    return run_virtual(ep.specs, ep.cluster, policy="dl2", models=ep.models, stop_at_s=EPISODE_LIMIT_S,
                       deciding=policy).summary


def _end_s(summary: dict) -> float:
    return START_S + float(summary.get("makespan_s") or 0.0)


def _figures(summary: dict, rounds: _Rounds, settings: CountsTrainSettings) -> dict:
    jcts = [job["jct_s"] for job in summary["jobs"].values() if job.get("jct_s") is not None]
    returns = rounds.returns(_end_s(summary), settings)
    return {"jct_s": float(np.mean(jcts)) if jcts else math.nan, "makespan_s": float(summary["makespan_s"]),
            "reward": float(returns[0]) if len(returns) else 0.0}


# ---------------------------------------------------------------------------------------------------------------
# Imitation


def teacher_decisions(settings: CountsTrainSettings) -> tuple[Decisions, Decisions]:
    train, held = Decisions(), Decisions()
    rng = np.random.default_rng([settings.seed, 0])
    for number in range(settings.teacher_episodes):
        ep = episode(settings, np.random.default_rng([settings.seed, 10, number]))
        teacher = _Teaching()
        summary = run_episode(ep, teacher)
        returns = teacher.rounds.returns(_end_s(summary), settings)
        for index, steps, round_, targets in teacher.steps:
            into = held if rng.random() < settings.held_out else train
            into.rounds.append((round_, targets))
            for observation, action in steps:
                into.observations.append(observation)
                into.actions.append(action)
                into.returns.append(float(returns[index]))
    return train, held


def _accuracy(net: ActorCritic, data: Decisions) -> float | None:
    """The teacher's actions the network takes (None without any: the report is standard JSON)."""
    return action_accuracy(net, data) if data.actions else None


def rounds_same(net: ActorCritic, data: Decisions) -> float | None:
    """Share of rounds in which the greedy network gives every job the counts the teacher's steps reach."""
    if not data.rounds:
        return None
    fast, same = numpy_net(net), 0
    for round_, targets in data.rounds:
        reached = round_.start()
        for _, action in teacher_steps(round_, targets):
            if action < len(round_.jobs) * KINDS:
                reached = round_.apply(reached, action)
        given, _ = _Sampling(fast, None).choose(round_)
        same += int(np.array_equal(given, reached))
    return same / len(data.rounds)


# ---------------------------------------------------------------------------------------------------------------
# Reinforcement learning and evaluation


def rl_episode(net: ActorCritic, trainer: gluon.Trainer, settings: CountsTrainSettings, number: int) -> float:
    rng = np.random.default_rng([settings.seed, 3, number])
    ep = episode(settings, np.random.default_rng([settings.seed, 11, number]))
    sampler = _Sampling(numpy_net(net), rng)
    summary = run_episode(ep, sampler)
    returns = sampler.rounds.returns(_end_s(summary), settings)
    if sampler.steps:  # every step's round is marked: a round is chosen only when jobs ask
        actor_critic_pass(net, trainer, sampler.steps, returns, settings)
    return float(returns[0]) if len(returns) else 0.0


def evaluation_episodes(settings: CountsTrainSettings) -> list[Episode]:
    return [episode(settings, np.random.default_rng([settings.seed, 12, n])) for n in range(settings.eval_episodes)]


def evaluate(policy_of, settings: CountsTrainSettings, episodes: Sequence[Episode]) -> dict:
    """Mean JCT, makespan and reward over `episodes`; `policy_of()` gives a fresh recording policy."""
    figures = []
    for ep in episodes:
        policy = policy_of()
        figures.append(_figures(run_episode(ep, policy), policy.rounds, settings))
    return {key: float(np.mean([f[key] for f in figures])) for key in ("jct_s", "makespan_s", "reward")}


# ---------------------------------------------------------------------------------------------------------------
# The whole run

_AT_LEAST = {"nodes": 1, "slots_per_node": 3, "min_jobs": 1, "episode_jobs": 1, "hidden": 1, "teacher_episodes": 1,
             "imitation_epochs": 0, "batch_size": 1, "rl_episodes": 0, "eval_episodes": 1, "select_every": 1,
             "checkpoint_every": 1}


def _check(settings: CountsTrainSettings) -> None:
    if settings.reward not in REWARDS:
        raise ValueError(f"reward: {settings.reward!r}; expected one of {', '.join(REWARDS)}")
    if settings.imitate not in RUN_TEACHERS:
        raise ValueError(f"--imitate: {settings.imitate!r} does not decide Coach's job counts; expected one of "
                         f"{', '.join(RUN_TEACHERS)}")
    check_ranges(settings, _AT_LEAST, positive=("learning_rate", "rl_learning_rate", "discount_s"))
    if settings.min_jobs > settings.episode_jobs:
        raise ValueError(f"episode_jobs: expected at least min_jobs ({settings.min_jobs}), got "
                         f"{settings.episode_jobs}")


def train_counts(out: Path, seed: int = 0, *, imitate: str = "coach", resume: bool = False,
                 on_progress: ProgressCallback | None = None, **options) -> CountsReport:
    """Imitate `imitate` in virtual-time episodes, then RL; the model at `out`. `options`: any other
    CountsTrainSettings field. ValueError (one line) for a bad setting or a checkpoint of other settings."""
    settings = CountsTrainSettings(imitate=imitate, seed=seed, **options)
    _check(settings)
    with threadpool_limits(limits=1):
        return _train(settings, Path(out), resume, on_progress or (lambda *_: None))


#: state.json's keys beside version, settings, phase and done, and their kinds (coach.dl2.training.check_state)
STATE_KINDS = {"level": "text", "imitation_losses": "numbers", "train_accuracy": "number?",
               "held_out_accuracy": "number?", "held_out_rounds_same": "number?", "evaluation": "nested",
               "episode_rewards": "numbers", "best": "figures", "selection": "figure-list"}


def _check_state(state: dict, folder: Path, settings: CountsTrainSettings) -> None:
    """ValueError (one line naming the file) for a checkpoint's state this trainer did not write."""
    path = folder / "state.json"
    check_state(state, path, {"imitation": settings.imitation_epochs, "rl": settings.rl_episodes}, STATE_KINDS,
                optional=("best", "selection"))
    if state["phase"] == "rl" and not _is_number(state.get("best", state["evaluation"].get("imitation", {})).get(
            "jct_s")):
        raise ValueError(f"{path}: best: expected the imitation's or best network's figures with jct_s")
    if "best" in state and not (folder / "best.params").is_file():
        raise ValueError(f"{folder / 'best.params'}: (file): no such file (the checkpoint's best network)")


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _train(settings: CountsTrainSettings, out: Path, resume: bool, on_progress: ProgressCallback) -> CountsReport:
    folder = checkpoint_dir(out)
    state = load_checkpoint(folder, settings) if resume else None
    if state is not None and state.get("level") != "run":
        raise ValueError(f"{folder}: a checkpoint of another training; delete it or train without --resume")
    net = new_network(settings.seed, settings.hidden, COUNTS_SHAPE)
    if state is not None:
        _check_state(state, folder, settings)
        load_network(net, folder / "net.params")
    else:
        state = {"version": CHECKPOINT_VERSION, "level": "run", "settings": asdict(settings), "phase": "imitation",
                 "done": 0, "imitation_losses": [], "train_accuracy": None, "held_out_accuracy": None,
                 "held_out_rounds_same": None, "evaluation": {}, "episode_rewards": []}
    out.parent.mkdir(parents=True, exist_ok=True)
    evaluation = evaluation_episodes(settings)

    if state["phase"] == "imitation":
        trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": settings.learning_rate})
        if state["done"]:
            load_trainer(trainer, folder / "trainer.states")
        if settings.imitation_epochs > 0:
            train_set, held_set = teacher_decisions(settings)
            imitation_epochs(net, trainer, train_set, settings, state, folder, on_progress)
            state["train_accuracy"] = _accuracy(net, train_set)
            state["held_out_accuracy"] = _accuracy(net, held_set)
            state["held_out_rounds_same"] = rounds_same(net, held_set)
        state["evaluation"]["teacher"] = evaluate(_Teaching, settings, evaluation)
        fast = numpy_net(net)
        state["evaluation"]["imitation"] = evaluate(lambda: _Sampling(fast, None), settings, evaluation)
        state["phase"], state["done"] = "rl", 0
        save_checkpoint(folder, net, trainer, state, imitation=True)

    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": settings.rl_learning_rate})
    if state["done"]:
        load_trainer(trainer, folder / "trainer.states")
    best = folder / "best.params"
    if "best" not in state:  # the imitation network is the first candidate: RL is kept only where it does better
        save_network(net, best)
        state["best"] = {"episodes": 0, **state["evaluation"]["imitation"]}
    for number in range(state["done"], settings.rl_episodes):
        reward = rl_episode(net, trainer, settings, number)
        state["episode_rewards"].append(reward)
        state["done"] = number + 1
        on_progress("rl", number + 1, settings.rl_episodes, {"reward": reward})
        if (number + 1) % settings.select_every == 0 or number + 1 == settings.rl_episodes:
            fast = numpy_net(net)
            figures = evaluate(lambda fast=fast: _Sampling(fast, None), settings, evaluation)
            state["selection"] = [*state.get("selection", []), {"episodes": number + 1, **figures}]
            if figures["jct_s"] < state["best"]["jct_s"]:
                save_network(net, best)
                state["best"] = {"episodes": number + 1, **figures}
        if (number + 1) % settings.checkpoint_every == 0:
            save_checkpoint(folder, net, trainer, state)
    state["evaluation"]["last"] = state.get("selection", [{}])[-1] if settings.rl_episodes else {}
    load_network(net, best)
    state["evaluation"]["final"] = state["best"]
    report = CountsReport(out, settings, state["train_accuracy"], state["held_out_accuracy"],
                          state["held_out_rounds_same"], state["evaluation"], list(state["episode_rewards"]),
                          list(state.get("selection", [])))
    save_outputs(out, net, json.dumps(report.as_dict(), indent=1), folder)
    return report
