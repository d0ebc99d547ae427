"""DL2 (Peng et al., "DL2: A Deep Learning-driven Scheduler for Deep Learning Clusters", 2019) in Coach: a small
actor-critic network, warmed up by imitating another policy's decisions and then trained by reinforcement
learning, that schedules by one action at a time. Two round types, one network design:

- features: the cluster simulator's GPU jobs: one more GPU for one job, or STOP (the `dl2` simulator policy,
  trained in the simulator by coach.dl2.learn_cluster);
- counts: Coach's own jobs: one more worker, one more server, or both, for one job, or STOP (`coach run --policy
  dl2`, trained in virtual-time runs of Coach's lifecycle by coach.dl2.learn_run);
- network: the MXNet Gluon actor-critic (action kinds per job: 1 or 3) and its numpy forward pass;
- policy: the `dl2` simulator Policy, greedy on a trained model file.

`dl2(seed)` (the registry's factory) imports MXNet only when called, so listing the policies stays cheap.
"""

from __future__ import annotations

from pathlib import Path

#: The model shipped with Coach (trained by coach.dl2.learn_cluster; the command is in docs/learned-policy.md).
DEFAULT_MODEL = Path(__file__).with_name("dl2_model.params")


def imitation_model(model: Path) -> Path:
    """Where a training that writes `model` leaves its network after imitation only (before RL)."""
    return model.with_name(model.stem + "-imitation.params")


#: The same training's network after imitation only (before reinforcement learning), for comparison.
IMITATION_MODEL = imitation_model(DEFAULT_MODEL)

#: The network for Coach's own jobs (workers and servers; dl2.counts), trained in virtual time by
#: coach.dl2.learn_run; `coach run --policy dl2` and `coach serve --policy dl2` decide with it.
COUNTS_MODEL = Path(__file__).with_name("dl2_counts_model.params")
COUNTS_IMITATION_MODEL = imitation_model(COUNTS_MODEL)


class ModelFileError(ValueError):
    """A DL2 model file that is missing or does not fit this network (one line, naming the file)."""


def dl2(seed: int, model: Path = DEFAULT_MODEL):
    """The `dl2` policy on `model` (greedy, so `seed` is unused). ModelFileError (a ValueError whose one line names
    the file and says how to train one) when the file is missing or does not fit."""
    del seed
    from coach.dl2.cluster_policy import load_policy

    model = Path(model)
    if not model.is_file():
        raise ModelFileError(f"{model}: no DL2 model file here; train one with `coach train-policy --imitate drf "
                             f"--workloads WORKLOAD.csv... --out {model}`")
    return load_policy(model)


def load_counts(model: Path = COUNTS_MODEL):
    """The fast (numpy) network of a counts model file; ModelFileError (one line naming the file) when it is
    missing or does not fit."""
    from coach.dl2.run_round import COUNTS_SHAPE
    from coach.dl2.network import NumpyNet, load_network

    model = Path(model)
    if not model.is_file():
        raise ModelFileError(f"{model}: no DL2 model file here; train one with `coach train-policy --level run "
                             f"--imitate coach --out {model}`")
    return NumpyNet.of(load_network(model, COUNTS_SHAPE))


def dl2_imitation(seed: int):
    """The `dl2-imitation` policy: the shipped training's network before reinforcement learning."""
    return dl2(seed, IMITATION_MODEL)


#: A factory marked learned is no teacher: imitating a network would only copy what it copied.
dl2.learned = dl2_imitation.learned = True

__all__ = ["COUNTS_IMITATION_MODEL", "COUNTS_MODEL", "DEFAULT_MODEL", "IMITATION_MODEL", "ModelFileError", "dl2",
           "dl2_imitation", "imitation_model", "load_counts"]
