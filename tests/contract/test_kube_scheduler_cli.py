"""`coach scheduler` and `coach bench kube-scheduler` on bad input, and a small benchmark run end to end."""

from __future__ import annotations

import json
import math

import pytest

from tests.fakes.kube_apiserver import FakeApiServer
from coach.ui.cli import main


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_missing_kubeconfig_is_bad_input(tmp_path, capsys):
    assert main(["scheduler", "--kubeconfig", str(tmp_path / "nope")]) == 2
    assert one_line(capsys.readouterr().err) == f"coach scheduler: --kubeconfig: {tmp_path / 'nope'}: no such file"


def test_a_kubeconfig_that_is_not_one_is_bad_input(tmp_path, capsys):
    broken = tmp_path / "kubeconfig"
    broken.write_text("clusters: [\n")
    assert main(["scheduler", "--kubeconfig", str(broken)]) == 2
    assert one_line(capsys.readouterr().err).startswith(
        f"coach scheduler: --kubeconfig: {broken}: not a usable kubeconfig")


def test_an_unknown_profile_is_bad_input(tmp_path, capsys):
    assert main(["scheduler", "--kubeconfig", str(tmp_path), "--profile", "fastest"]) == 2
    assert "argument --profile: invalid choice: 'fastest'" in one_line(capsys.readouterr().err)


def test_an_apiserver_nobody_answers_at_is_one_line_and_exit_1(tmp_path, capsys):
    with FakeApiServer() as fake:  # gone when the scheduler starts: nothing listens at its port
        config, url = fake.write_kubeconfig(tmp_path / "kubeconfig"), fake.url
    assert main(["scheduler", "--kubeconfig", str(config), "--metrics-port", "0"]) == 1
    assert one_line(capsys.readouterr().err) == (
        f"coach scheduler: cannot reach the apiserver at {url}: [Errno 111] Connection refused")


def test_bench_refuses_more_pods_than_slots(capsys):
    assert main(["bench", "kube-scheduler", "--nodes", "2", "--pods", "9", "--slots-per-node", "4"]) == 2
    assert one_line(capsys.readouterr().err) == "--pods: 9 pods do not fit 2 nodes x 4 slots"


@pytest.mark.parametrize("binder", ["process", "threads"])
def test_bench_binds_every_pod_once_and_says_how_fast(capsys, binder):
    assert main(["bench", "kube-scheduler", "--nodes", "40", "--pods", "120", "--apiserver", "thread",
                 "--binder", binder]) == 0
    result = json.loads(one_line(capsys.readouterr().out))
    assert (result["pods_bound"], result["pods_bound_in_apiserver"], result["conflicts"]) == (120, 120, 0)
    assert result["binder"] == binder and (result["cpu_binder_s"] is None) == (binder == "threads")
    assert result["pods_per_s"] > 0 and result["seconds"] > 0
    # real percentiles of the recorded latencies, never a histogram bucket's bound or null
    assert 0 < result["bind_latency_p50_s"] <= result["bind_latency_p99_s"] < result["seconds"] + 1
    assert result["cpu_load_s"] > 0 and result["events_written"] >= 0


def test_bench_percentiles_are_nearest_rank_of_what_was_recorded():
    from coach.kube_scheduler.bench import _percentiles

    assert _percentiles([0.3, 0.1, 0.2, 0.4], (0.5, 0.99)) == (0.2, 0.4)
    assert _percentiles([5.0], (0.5, 0.99)) == (5.0, 5.0)
    assert all(math.isnan(value) for value in _percentiles([], (0.5,)))


def test_the_command_line_offers_every_binder_of_the_registry():
    from coach.kube_scheduler.loop import BINDERS
    from coach.ui.cli import BINDER_CHOICES

    assert sorted(BINDER_CHOICES) == sorted(BINDERS)
