"""`coach train-policy`: a tiny training through the command line, and its bad input as one line and exit 2."""

from __future__ import annotations

import json

from coach.simulator.policies.dl2 import dl2
from coach.ui.cli import main
from tests.support import pollux_data

WORKLOAD = pollux_data() / "workloads-0.5" / "workload-1.csv"


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
