"""DL2 (Peng et al., "DL2: A Deep Learning-driven Scheduler for Deep Learning Clusters", 2019) in Coach: a small
actor-critic network, warmed up by imitating another policy's decisions and then trained by reinforcement
learning, that schedules by one action at a time. One network design at both levels of policy:

- the cluster level, the simulator's GPU jobs: one more GPU for one job, or STOP (`coach simulate --policy dl2`);
- the run level, Coach's own jobs: one more worker, one more server, or both, for one job, or STOP (`coach run
  --policy dl2`, `coach serve --policy dl2`).

The package spans Coach's layers: the cluster simulator's registry (coach.simulator.policies) and the app's
(coach.app.run_policies) import its policies, while its trainers import the simulator and the app. So it stays out
of the top-level layers contract and is layered inside (the `dl2` contract in pyproject.toml), top to bottom:

    learn_cluster | learn_run     the trainers: imitation, then RL, in the cluster simulator and in virtual-time
                                  runs of Coach's lifecycle (coach.app.virtual_run)
    training                      what both trainers share: gradient steps, checkpoints, settings checks
    cluster_policy | run_policy   the policies the two registries offer; beside them, imitation: a cluster
      | imitation                 teacher's round as DL2's steps
    network                       the MXNet Gluon actor-critic and its numpy forward pass
    cluster_round | run_round     what the network sees of a round, and which actions are legal
    observation                   the shape, the observation and the padded batch both rounds share

Nothing below the trainers imports the app, the drivers or the simulator's engine (the `dl2-policies` contract);
this module holds only the model files' paths and their error, so that importing it costs nothing.
"""

from __future__ import annotations

from pathlib import Path

#: The model shipped with Coach (trained by coach.dl2.learn_cluster; the command is in docs/learned-policy.md).
CLUSTER_MODEL = Path(__file__).with_name("dl2_model.params")


def imitation_model(model: Path) -> Path:
    """Where a training that writes `model` leaves its network after imitation only (before RL)."""
    return model.with_name(model.stem + "-imitation.params")


def report_file(model: Path) -> Path:
    """Where a training that writes `model` leaves its settings and what it measured (`<stem>.json`)."""
    return model.with_name(model.stem + ".json")


#: The fewest jobs a run-level training episode starts together: `--episode-jobs` (the most) is at least this.
RUN_MIN_JOBS = 4


#: The same training's network after imitation only (before reinforcement learning), for comparison.
CLUSTER_IMITATION_MODEL = imitation_model(CLUSTER_MODEL)

#: The network for Coach's own jobs (workers and servers; coach.dl2.run_round), trained in virtual time by
#: coach.dl2.learn_run; `coach run --policy dl2` and `coach serve --policy dl2` decide with it.
RUN_MODEL = Path(__file__).with_name("dl2_counts_model.params")
RUN_IMITATION_MODEL = imitation_model(RUN_MODEL)


class ModelFileError(ValueError):
    """A DL2 model file that is missing or does not fit this network (one line, naming the file)."""


__all__ = ["CLUSTER_IMITATION_MODEL", "CLUSTER_MODEL", "RUN_IMITATION_MODEL", "RUN_MIN_JOBS", "RUN_MODEL",
           "ModelFileError", "imitation_model", "report_file"]
