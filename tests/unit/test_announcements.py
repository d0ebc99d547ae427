"""The functions a job's next step adds hear where it will meet while the current step runs (coach/drivers/core.py).

A calibration point that adds a worker or a server runs on a function the step before did not use: its request
cannot carry the announcement, so the driver sends that function an AheadRequest beside the step, and its spare
joins the rendezvous ahead like the others (coach_functions/spares.py `announce`). Run through the virtual-time driver
on the simulated platform, which records every request.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import coach.app.virtual_run as virtual_run
from coach.domain.cluster import DEFAULT_CLUSTER
from coach.domain.contracts import AheadRequest, EpochRequest
from coach.domain.invocation import ERROR, Failure
from coach.domain.jobs import JobSpec
from coach.platforms.virtual import VirtualPlatform
from coach.policy.planning import CALIBRATION_POINTS


def dynamic(name: str = "lenet", **changes) -> JobSpec:
    spec = JobSpec(name=name, source=Path(f"/jobs/{name}.yaml"), model_path=Path("/jobs/m.py"), batch_size=64,
                   optimizer="sgd", optimizer_params={}, learning_rate=0.1, target_loss=0.0, consecutive=3,
                   max_epochs=2, budget=10.0, workers=None, servers=None, max_workers=4, max_servers=2, seed=0,
                   epoch_timeout_s=60.0, calibration_fraction=0.25)
    return replace(spec, **changes)


class Recording(VirtualPlatform):
    """The simulated platform, keeping every epoch and ahead request in the order sent; `refuse`: ahead requests
    fail, as a function that is gone would."""

    refuse = False

    def invoke(self, ref, request, timeout_s):
        if isinstance(request, (EpochRequest, AheadRequest)):
            self.sent.append((ref.fid.name, request))
        if isinstance(request, AheadRequest) and self.refuse:
            return Failure(ref.name, ERROR, "connection refused")
        return super().invoke(ref, request, timeout_s)


def run(monkeypatch, refuse: bool = False, spec: JobSpec | None = None):
    platforms = []

    def make(*args, **kwargs):
        platform = Recording(*args, **kwargs)
        platform.sent, platform.refuse = [], refuse
        platforms.append(platform)
        return platform

    monkeypatch.setattr(virtual_run, "VirtualPlatform", make)
    result = virtual_run.run_virtual([spec or dynamic()], DEFAULT_CLUSTER, policy="coach")
    return result, platforms[0].sent


def steps(sent) -> list[dict]:
    """Per step (in order): its epoch requests by function, and the ahead requests that announced it (those whose
    announcement is the step's rendezvous id); an ahead request that announced no step that ran fails the test."""
    out: list[dict] = []
    for name, request in sent:
        if isinstance(request, EpochRequest):
            if not out or request.step != out[-1]["step"]:
                out.append({"step": request.step, "epoch": {}, "ahead": {}})
            out[-1]["epoch"][name] = request
    by_id = {next(iter(step["epoch"].values())).rendezvous_id: step for step in out}
    for name, request in sent:
        if isinstance(request, AheadRequest):
            assert request.next.id in by_id, f"{name} was told of a step that never ran"
            by_id[request.next.id]["ahead"][name] = request
    return out


def meets(step: dict) -> str | None:
    """The rendezvous id of a step (one for all its requests)."""
    ids = {r.rendezvous_id for r in step["epoch"].values()}
    assert len(ids) == 1
    return ids.pop()


def test_every_calibration_point_that_adds_a_function_has_it_told_where_that_point_meets(monkeypatch):
    """The functions a point shares with the one before hear it in their own request (`next`), the others from an
    AheadRequest sent beside the point before; the point then meets as announced."""
    _, sent = run(monkeypatch)
    calibration = steps(sent)[:len(CALIBRATION_POINTS)]

    assert [next(iter(s["epoch"].values())).epoch for s in calibration] == [0] * len(CALIBRATION_POINTS)
    assert meets(calibration[0]) is None and calibration[0]["ahead"] == {}  # after the deploy: chosen then
    for before, step in zip(calibration, calibration[1:]):
        added = set(step["epoch"]) - set(before["epoch"])
        assert added and set(step["ahead"]) == added  # told to the added ones, and only to them
        assert meets(step) is not None
        for name, ahead in step["ahead"].items():
            request = step["epoch"][name]
            assert (ahead.role, ahead.next.id, ahead.next.ps) == (request.role, request.rendezvous_id, request.ps)
        for name in set(step["epoch"]) & set(before["epoch"]):
            assert before["epoch"][name].next.id == meets(step)


def test_a_static_job_sends_nothing_beside_its_epochs_and_meets_as_its_requests_announced(monkeypatch):
    _, sent = run(monkeypatch, spec=dynamic(workers=2, servers=1, max_workers=None, max_servers=None, max_epochs=3))

    by_step = steps(sent)
    assert [len(s["epoch"]) for s in by_step] == [4, 4, 4] and [s["ahead"] for s in by_step] == [{}, {}, {}]
    for before, step in zip(by_step, by_step[1:]):
        assert {r.next.id for r in before["epoch"].values()} == {meets(step)}


def test_an_ahead_request_that_fails_fails_nothing(monkeypatch):
    result, sent = run(monkeypatch, refuse=True)

    assert any(isinstance(request, AheadRequest) for _, request in sent)
    summary = result.summary["jobs"]["lenet"]
    assert (summary["stop_reason"], summary["epochs"]) == ("max_epochs", 2)
