"""coach_functions/epochs.py: the folder where a function's epoch children are registered, so that a cancel received by
any of its worker processes stops them. Real processes, real /proc; entries of dead processes and of reused pids
are dropped, never signalled.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from coach.domain.contracts import EpochRequest, Hyper, PsAddress
from coach_functions import children, epochs
from coach_functions.host_state import HostState
from tests.support import wait_for

REQUEST = EpochRequest(job="j", epoch=1, step=1, attempt=1, role="scheduler",
                       ps=PsAddress("127.0.0.1", 9091, 1, 1, "127.0.0.1"), model_path="m.py", data_fraction=1.0,
                       hyper=Hyper(batch_size=8, optimizer="sgd", learning_rate=0.1, optimizer_params={}, seed=0),
                       checkpoint_load=None, checkpoint_save="ckpt", deadline_s=30.0)


@pytest.fixture
def sleeper():
    """A child process that sleeps until killed; its pid. Reaped (and killed if need be) afterwards."""
    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    yield pid
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):  # reaped by the test already
        pass


def test_a_registered_child_is_signalled_and_counted(tmp_path, sleeper):
    registry = epochs.EpochRegistry(tmp_path / "epochs")

    assert registry.add(sleeper) is True
    entry = f"{sleeper}-{epochs.start_ticks(sleeper)}"
    assert os.listdir(tmp_path / "epochs") == [entry] and registry.entry(sleeper) == entry
    assert registry.cancel_all() == 1

    _, status = os.waitpid(sleeper, 0)
    assert os.waitstatus_to_exitcode(status) == -signal.SIGKILL
    registry.discard(entry)
    assert os.listdir(tmp_path / "epochs") == []


def test_an_entry_whose_pid_now_names_another_process_is_dropped_not_signalled(tmp_path, sleeper):
    registry = epochs.EpochRegistry(tmp_path / "epochs")
    reused = tmp_path / "epochs" / f"{sleeper}-{epochs.start_ticks(sleeper) - 1}"  # an older process had this pid
    reused.touch()

    assert registry.cancel_all() == 0
    assert not reused.exists()
    assert os.waitpid(sleeper, os.WNOHANG) == (0, 0)  # still running


def test_an_entry_of_a_process_that_is_gone_is_dropped(tmp_path):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    registry = epochs.EpochRegistry(tmp_path / "epochs")
    registry.add(pid)  # registered while it ran (a zombie until reaped: its pid still holds)
    os.waitpid(pid, 0)

    assert registry.cancel_all() == 0
    assert os.listdir(tmp_path / "epochs") == []


def test_a_child_that_ended_and_awaits_its_reaping_is_not_counted(tmp_path):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    registry = epochs.EpochRegistry(tmp_path / "epochs")
    registry.add(pid)
    wait_for(lambda: Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z", what="a zombie")

    assert registry.cancel_all() == 0
    assert len(os.listdir(tmp_path / "epochs")) == 1  # its host removes it when it reaps it
    os.waitpid(pid, 0)


def test_the_folder_must_be_this_users_own_and_closed_to_others(tmp_path):
    (tmp_path / "open").mkdir(mode=0o777)
    os.chmod(tmp_path / "open", 0o777)
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "real")

    for name in ("open", "link"):
        with pytest.raises(epochs.RegistryError, match=rf"{name}: not a folder of this user closed to others"):
            epochs.EpochRegistry(tmp_path / name)
    assert oct(os.stat(epochs.EpochRegistry(tmp_path / "new" / "epochs").folder).st_mode & 0o777) == "0o700"


def test_the_registry_is_named_by_the_environment_under_the_temp_dir(tmp_path, monkeypatch, capfd):
    monkeypatch.delenv(epochs.EPOCHS_DIR_ENV, raising=False)
    assert epochs.registry_from_env() is None  # Coach's local host: one process per function, children in memory

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.setenv(epochs.EPOCHS_DIR_ENV, "coach-epochs")
    assert epochs.registry_from_env().folder == tmp_path / "coach-epochs"

    (tmp_path / "shared").mkdir(mode=0o777)
    os.chmod(tmp_path / "shared", 0o777)
    monkeypatch.setenv(epochs.EPOCHS_DIR_ENV, str(tmp_path / "shared"))  # absolute: as it is
    assert epochs.registry_from_env() is None
    assert capfd.readouterr().err == (f"COACH_EPOCHS_DIR: {tmp_path / 'shared'}: not a folder of this user closed to "
                                      f"others: a cancel reaches this worker process's epochs only\n")


def test_a_cancel_received_by_one_host_stops_the_epoch_another_host_runs(tmp_path, monkeypatch):
    """Two hosts of one function (two worker processes on Nuclio) share nothing in memory, only the folder."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.setenv(epochs.EPOCHS_DIR_ENV, "coach-epochs")
    running, other = HostState(), HostState()
    outcome = {}

    def epoch():
        outcome["reply"] = children.run_in_child(running, replace(REQUEST, deadline_s=30.0),
                                                lambda r: time.sleep(30) or {})

    thread = threading.Thread(target=epoch)
    thread.start()
    wait_for(lambda: os.listdir(tmp_path / "coach-epochs"), what="the epoch child registered")

    assert children.cancel_children(other) == 1
    thread.join(timeout=10)
    assert not thread.is_alive()  # the 30 s epoch ended with its child
    assert outcome["reply"] == (500, {"error": "epoch child exited with code -9"})
    assert running.children == set() and os.listdir(tmp_path / "coach-epochs") == []
    assert children.cancel_children(other) == 0
