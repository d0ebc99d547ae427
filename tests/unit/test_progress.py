"""coach.progress: how a run shows itself. PlainView prints one line per change, QuietView prints nothing."""

from __future__ import annotations

import re
from dataclasses import replace

from coach.views.terminal import VIEWS, JobStatus, LiveView, PlainView, QuietView

TIME = r"\d\d:\d\d:\d\d "  # every plain line starts with the wall-clock time

TRAINING = JobStatus(job="lenet", phase="training", epoch=2, loss=0.5, val_loss=0.25, workers=2, servers=1,
                     cost=0.0123, budget=0.5, message="epoch 2 done")
WAITING = JobStatus(job="resnet", phase="waiting", epoch=0, loss=None, val_loss=None, workers=4, servers=2,
                    cost=0.0, budget=2.0, message="")


def lines_of(text: str) -> list[str]:
    """Printed lines without their leading time stamp (checked to be there)."""
    lines = text.splitlines()
    for line in lines:
        assert re.match(TIME, line), line
    return [line[len("00:00:00 "):] for line in lines]


def test_plain_view_prints_one_line_per_status(capsys):
    with PlainView("run-1") as view:
        view.update(TRAINING)
        view.update(WAITING)

    out = capsys.readouterr()
    assert lines_of(out.out) == [
        "lenet: training epoch=2 loss=0.5000 val_loss=0.2500 w/s=2/1 cost=0.0123/0.5 (epoch 2 done)",
        "resnet: waiting epoch=0 loss=- val_loss=- w/s=4/2 cost=0.0000/2",
    ]
    assert out.err == ""


def test_plain_view_suppresses_an_exact_repeat_of_a_jobs_status(capsys):
    view = PlainView("run-1")

    view.update(TRAINING)
    view.update(WAITING)
    view.update(TRAINING)  # same as lenet's last status: nothing new to say
    view.update(WAITING)

    assert len(capsys.readouterr().out.splitlines()) == 2


def test_plain_view_prints_again_when_anything_changes(capsys):
    view = PlainView("run-1")

    view.update(TRAINING)
    view.update(replace(TRAINING, cost=0.0246))
    view.update(TRAINING)  # back to the earlier status is a change too

    assert [line.split(" cost=")[1] for line in lines_of(capsys.readouterr().out)] == [
        "0.0123/0.5 (epoch 2 done)", "0.0246/0.5 (epoch 2 done)", "0.0123/0.5 (epoch 2 done)"]


def test_plain_view_final_prints_a_table_of_every_job(capsys):
    view = PlainView("run-1")
    view.update(TRAINING)
    view.update(WAITING)
    capsys.readouterr()

    view.final()

    table = capsys.readouterr().out
    assert "run run-1" in table
    for text in ("job", "phase", "lenet", "resnet", "training", "waiting", "0.5000", "2/1", "0.0123 / 0.5",
                 "epoch 2 done"):
        assert text in table
    assert table.index("lenet") < table.index("resnet")


def test_quiet_view_prints_nothing_but_keeps_the_statuses(capsys):
    with QuietView("run-1") as view:
        view.update(TRAINING)
        view.update(WAITING)
        view.final()

    assert capsys.readouterr() == ("", "")
    assert view.statuses == {"lenet": TRAINING, "resnet": WAITING}


def test_the_views_are_registered_by_the_names_the_cli_uses():
    assert VIEWS == {"live": LiveView, "plain": PlainView, "quiet": QuietView}
