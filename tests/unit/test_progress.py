"""coach.views.terminal: how a run shows itself. PlainView prints one line per change, QuietView prints nothing."""

from __future__ import annotations

import io
import os
import re
import threading
import time
from dataclasses import replace

import pytest

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
        "lenet: training epochs_done=2 loss=0.5000 val_loss=0.2500 w/s=2/1 cost=0.0123/0.5 (epoch 2 done)",
        "resnet: waiting epochs_done=0 loss=- val_loss=- w/s=4/2 cost=0.0000/2",
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
    for text in ("job", "phase", "done", "lenet", "resnet", "training", "waiting", "0.5000", "2/1",
                 "0.0123 / 0.5", "epoch 2 done"):
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


# --------------------------------------------------------------------------- which epoch a line is about


RUNNING_3 = replace(TRAINING, message="running epoch 3")  # epoch 3 runs; 2 are done


def test_a_step_that_is_still_running_is_not_a_plain_line_its_end_is(capsys):
    view = PlainView("run-1")

    view.update(RUNNING_3)
    view.update(replace(RUNNING_3, epoch=3, loss=0.25, message="epoch 3 done"))

    assert lines_of(capsys.readouterr().out) == [
        "lenet: training epochs_done=3 loss=0.2500 val_loss=0.2500 w/s=2/1 cost=0.0123/0.5 (epoch 3 done)"]
    assert view.statuses["lenet"].message == "epoch 3 done"


def test_the_live_table_names_its_epoch_column_done_and_shows_the_running_step():
    out = io.StringIO()
    view = PlainView("run-1", out=out)
    view.update(RUNNING_3)
    view.final()

    table = out.getvalue()
    assert "done" in table and "running epoch 3" in table


# --------------------------------------------------------------------------- an output that goes away


def closed_pipe():
    """The writing end of a pipe whose reader has left, as `coach run | head -1` leaves stdout."""
    read_fd, write_fd = os.pipe()
    os.close(read_fd)
    return os.fdopen(write_fd, "w")


def test_a_closed_pipe_stops_the_plain_view_printing_and_nothing_raises():
    out = closed_pipe()
    view = PlainView("run-1", out=out)

    view.update(TRAINING)  # EPIPE: Python ignores SIGPIPE, so this is BrokenPipeError
    view.update(WAITING)
    view.update(replace(TRAINING, epoch=3, message="epoch 3 done"))
    view.final()

    assert view.broken
    assert view.statuses["lenet"].epoch == 3  # it still follows the jobs
    out.write("results: somewhere\n")  # what the CLI prints last now goes to /dev/null, not into an error
    out.flush()
    out.close()


@pytest.mark.parametrize("view_class", [QuietView, PlainView])
def test_a_closed_output_file_does_not_raise_either(view_class):
    out = io.StringIO()
    out.close()
    view = view_class("run-1", out=out)

    view.update(TRAINING)
    view.final()

    assert view.statuses == {"lenet": TRAINING}


def test_an_error_that_is_not_a_vanished_output_still_raises():
    class Full(io.StringIO):
        def write(self, text):
            raise OSError(28, "No space left on device")

    view = PlainView("run-1", out=Full())
    with pytest.raises(OSError):
        view.update(TRAINING)


class Trickle(io.StringIO):
    """An output that takes every write in small pieces, with a pause: a line written without a lock tears."""

    def write(self, text):
        for start in range(0, len(text), 7):
            super().write(text[start:start + 7])
            time.sleep(0)
        return len(text)


def test_lines_of_concurrent_jobs_never_merge():
    out = Trickle()
    view = PlainView("run-1", out=out)

    def job(name: str) -> None:
        for epoch in range(1, 41):
            view.update(replace(TRAINING, job=name, epoch=epoch, message=f"epoch {epoch} done"))

    threads = [threading.Thread(target=job, args=(f"job{i}",)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    lines = lines_of(out.getvalue())
    assert len(lines) == 6 * 40
    pattern = re.compile(r"job\d: training epochs_done=(\d+) loss=0\.5000 val_loss=0\.2500 w/s=2/1 "
                         r"cost=0\.0123/0\.5 \(epoch \1 done\)")
    assert all(pattern.fullmatch(line) for line in lines), lines
