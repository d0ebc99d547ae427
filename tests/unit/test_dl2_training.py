"""Training the DL2 policy in the simulator on a Pollux workload: imitation agrees with its teacher on held-out
rounds, a tiny RL run improves its reward, and a run stopped half-way resumes to the same model. Small clusters
and short episodes keep every test to seconds; everything is seeded."""

from __future__ import annotations

import json

import numpy as np
import pytest
from mxnet import nd

from tests.support import needs, pollux_data
from coach.dl2.learn_cluster import train
from coach.dl2.checkpoint import checkpoint_dir
from coach.dl2.cluster_policy import dl2

WORKLOAD = pollux_data() / "workloads-0.5" / "workload-1.csv"  # 80 jobs over 8 hours
pytestmark = needs(WORKLOAD)


@pytest.mark.parametrize("teacher", ["drf", "optimus"])
def test_imitation_agrees_with_the_teacher_on_held_out_rounds(tmp_path, teacher):
    out = tmp_path / "m.params"
    report = train(teacher, [WORKLOAD], out, seed=0, cluster="2x4", rounds_per_workload=300, imitation_epochs=15,
                   rl_episodes=0)
    agreement = report.agreement
    assert agreement.round_count == 60 and agreement.decisions > 300
    assert agreement.actions >= 0.9, agreement  # the teacher's own decision in >= 90% of its held-out states
    assert agreement.gpus >= 0.9, agreement  # and greedy rounds give (almost) the teacher's GPUs
    assert out.is_file() and (tmp_path / "m-imitation.params").is_file()
    saved = json.loads((tmp_path / "m.json").read_text())
    assert saved["agreement"]["actions"] == agreement.actions and saved["settings"]["imitate"] == teacher
    dl2(0, out)  # the file is a usable policy


def test_a_tiny_reinforcement_learning_run_improves_its_reward(tmp_path):
    report = train("drf", [WORKLOAD], tmp_path / "m.params", seed=0, cluster="4x4", imitation_epochs=0,
                   rl_episodes=40, episode_jobs=20, horizon_rounds=60, eval_episodes=6)
    # the greedy policy's reward on the same 6 fixed episodes, before and after RL (the message shows both)
    assert report.reward_end > 1.05 * report.reward_start, (report.reward_start, report.reward_end)
    assert len(report.episode_rewards) == 40


class Stop(Exception):
    pass


def test_a_stopped_run_resumes_to_the_same_model(tmp_path):
    options = dict(seed=1, cluster="2x4", rounds_per_workload=40, imitation_epochs=2, rl_episodes=4,
                   episode_jobs=10, horizon_rounds=20, eval_episodes=1, checkpoint_every=2)
    whole = train("drf", [WORKLOAD], tmp_path / "whole.params", **options)

    def stop_in_episode_3(phase, done, total, metrics):
        if phase == "rl" and done == 3:
            raise Stop

    out = tmp_path / "broken.params"
    with pytest.raises(Stop):
        train("drf", [WORKLOAD], out, on_progress=stop_in_episode_3, **options)
    assert json.loads((checkpoint_dir(out) / "state.json").read_text())["done"] == 2
    resumed = train("drf", [WORKLOAD], out, resume=True, **options)

    assert resumed.episode_rewards == whole.episode_rewards
    assert resumed.reward_end == whole.reward_end
    mine, theirs = nd.load(str(out)), nd.load(str(tmp_path / "whole.params"))
    assert mine.keys() == theirs.keys()
    assert all(np.array_equal(mine[k].asnumpy(), theirs[k].asnumpy()) for k in mine)

    with pytest.raises(ValueError, match="made with other settings \\(seed\\)"):
        train("drf", [WORKLOAD], out, resume=True, **{**options, "seed": 2})


@pytest.mark.parametrize("teacher, message", [("fifo", "'fifo' is not elastic"), ("nope", "'nope' unknown policy"),
                                              ("dl2", "'dl2' is learned itself"),
                                              ("dl2-imitation", "'dl2-imitation' is learned itself")])
def test_a_teacher_must_be_an_elastic_policy_of_the_registry(tmp_path, teacher, message):
    with pytest.raises(ValueError, match=message):
        train(teacher, [WORKLOAD], tmp_path / "m.params", cluster="2x4", imitation_epochs=1, rl_episodes=0)
