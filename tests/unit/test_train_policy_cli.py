"""`coach train-policy`: a tiny training through the command line, and its bad input as one line and exit 2."""

from __future__ import annotations

import json

from coach.dl2.cluster_policy import dl2
from coach.ui.cli import main
from tests.support import needs, pollux_data

WORKLOAD = pollux_data() / "workloads-0.5" / "workload-1.csv"
pytestmark = needs(WORKLOAD)


def test_a_tiny_training_writes_a_usable_model_and_says_what_it_measured(tmp_path, capsys):
    out = tmp_path / "m.params"

    code = main(["train-policy", "--imitate", "drf", "--workloads", str(WORKLOAD), "--out", str(out),
                 "--cluster", "2x4", "--imitation-epochs", "2", "--rl-episodes", "2", "--episode-jobs", "8",
                 "--horizon-rounds", "10", "--quiet"])

    assert code == 0
    printed = capsys.readouterr().out
    assert printed.rstrip().endswith(f"model: {out}")
    report = json.loads(printed[:printed.rindex("model: ")])
    assert report["settings"]["imitate"] == "drf" and report["settings"]["rl_episodes"] == 2
    assert 0 <= report["agreement"]["actions"] <= 1
    dl2(0, out)  # loads as a policy


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    base = ["train-policy", "--imitate", "drf", "--out", str(tmp_path / "m.params")]

    assert main([*base, "--workloads", str(tmp_path / "none.csv")]) == 2
    assert "none.csv" in capsys.readouterr().err
    assert main(["train-policy", "--imitate", "drf", "--workloads", str(WORKLOAD), "--out", str(tmp_path)]) == 2
    assert "--out:" in capsys.readouterr().err
    assert main([*base, "--workloads", str(WORKLOAD), "--cluster", "0x0"]) == 2
    err = capsys.readouterr().err
    assert err.strip() and "Traceback" not in err
    assert main(["train-policy", "--imitate", "fifo", "--workloads", str(WORKLOAD), "--out", "x"]) == 2
    assert "invalid choice: 'fifo'" in capsys.readouterr().err


def test_run_level_training_writes_a_counts_model_the_run_policy_loads(tmp_path, capsys):
    from coach.dl2.run_policy import load_counts

    out = tmp_path / "counts.params"

    code = main(["train-policy", "--level", "run", "--imitate", "coach", "--out", str(out), "--imitation-epochs", "2",
                 "--rl-episodes", "2", "--episode-jobs", "5", "--teacher-episodes", "3", "--eval-episodes", "2",
                 "--quiet"])

    assert code == 0
    printed = capsys.readouterr().out
    report = json.loads(printed[:printed.rindex("model: ")])
    assert report["settings"]["episode_jobs"] == 5 and report["settings"]["teacher_episodes"] == 3
    assert 0 <= report["held_out_accuracy"] <= 1
    assert set(report["evaluation"]) == {"teacher", "imitation", "last", "final"}
    load_counts(out)


def test_run_level_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    base = ["train-policy", "--level", "run", "--out", str(tmp_path / "m.params")]

    assert main([*base, "--imitate", "drf"]) == 2
    assert capsys.readouterr().err.strip().endswith("--imitate: 'drf' does not decide Coach's job counts; expected "
                                                    "one of coach")
    assert main([*base, "--imitate", "coach", "--workloads", str(WORKLOAD)]) == 2
    assert "--workloads: only with --level cluster" in capsys.readouterr().err
    assert main([*base, "--imitate", "coach", "--episode-jobs", "2"]) == 2
    assert capsys.readouterr().err == ("--episode-jobs: must be >= 4 with --level run (an episode starts at least 4 "
                                       "jobs), got 2\n")
    assert main(["train-policy", "--imitate", "drf", "--out", str(tmp_path / "m.params")]) == 2
    assert "--workloads: required with --level cluster" in capsys.readouterr().err
    assert main([*base, "--level", "galaxy", "--imitate", "coach"]) == 2
    assert "invalid choice: 'galaxy'" in capsys.readouterr().err


def test_the_reward_is_a_run_level_choice(tmp_path, capsys):
    assert main(["train-policy", "--imitate", "drf", "--workloads", str(WORKLOAD), "--out", str(tmp_path / "m"),
                 "--reward", "jct"]) == 2
    assert "--reward: only with --level run" in capsys.readouterr().err
    assert main(["train-policy", "--imitate", "drf", "--workloads", str(WORKLOAD), "--out", str(tmp_path / "m"),
                 "--teacher-episodes", "3"]) == 2
    assert "--teacher-episodes: only with --level run" in capsys.readouterr().err
    assert main(["train-policy", "--level", "run", "--imitate", "coach", "--out", str(tmp_path / "m"), "--reward",
                 "fame"]) == 2
    assert "invalid choice: 'fame'" in capsys.readouterr().err
