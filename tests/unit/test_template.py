"""coach.platforms.template: hosts forked from one process that has imported MXNet once.

A forked host must behave as a freshly started one: the request's environment, working directory and log file,
its own pid, the run's token required; and it must die with the controller, even after `kill -9`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import requests

from coach.domain.identity import FunctionId, Role
from coach.domain.invocation import DEPLOY, Failure
from coach.platforms.host import TOKEN_ENV, TOKEN_HEADER
from coach.platforms.local import LocalPlatform
from coach.platforms import template as template_module
from coach.platforms.template import import_key, template_for
from tests.support import stderr_of

HERE = Path(__file__).resolve().parent  # `fake_echo` imports from here when it is the working directory
HANDLER = {Role.WORKER: "fake_echo:handler"}
TOKEN = "T"


def gone(pid: int) -> bool:
    """True when `pid` has exited (a zombie not yet reaped counts as exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def until(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def where(ref) -> dict:
    response = requests.post(f"{ref.url}where", headers={TOKEN_HEADER: TOKEN}, json={}, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def test_forked_hosts_get_their_own_environment_directory_and_pid_from_one_shared_template(tmp_path, monkeypatch):
    monkeypatch.chdir(HERE)
    first = LocalPlatform(tmp_path / "a", TOKEN, env={"COACH_TEST_PROBE": "first"}, handlers=HANDLER)
    second = LocalPlatform(tmp_path / "b", TOKEN, env={"COACH_TEST_PROBE": "second"}, handlers=HANDLER)
    try:
        assert template_for(first.env) is template_for(second.env)  # they differ only where MXNet does not read
        one = first.deploy(FunctionId("job", Role.WORKER, 0), "node")
        two = second.deploy(FunctionId("job", Role.WORKER, 1), "node")
        assert not isinstance(one, Failure) and not isinstance(two, Failure), (one, two)
        seen_one, seen_two = where(one), where(two)
        assert seen_one == {"pid": int(one.instance), "cwd": str(HERE), "probe": "first"}
        assert seen_two == {"pid": int(two.instance), "cwd": str(HERE), "probe": "second"}
        assert requests.get(one.url, timeout=10).status_code == 403  # the token is still required
        # a host's parent is the template, whose environment never held the run's token
        template = template_for(first.env)
        assert f"PPid:\t{template.pid}\n" in Path(f"/proc/{one.instance}/status").read_text()
        assert f"{TOKEN_ENV}=".encode() not in Path(f"/proc/{template.pid}/environ").read_bytes()
        assert stderr_of(one.instance) == str(tmp_path / "a" / "job-worker-0.log")
    finally:
        first.close()
    assert until(lambda: gone(int(one.instance)), 5)
    assert where(two)["probe"] == "second"  # closing one platform ends its hosts, not the template
    second.close()
    assert until(lambda: gone(int(two.instance)), 5)


def test_platforms_that_differ_in_what_mxnet_reads_at_import_get_their_own_template():
    base = {"HOME": "/tmp", "OMP_NUM_THREADS": "1"}
    assert import_key(base) == import_key({**base, "COACH_TEST_PROBE": "x", TOKEN_ENV: "secret"})
    assert import_key(base) != import_key({**base, "MXNET_ENGINE_TYPE": "NaiveEngine"})
    assert import_key(base) != import_key({**base, "OMP_NUM_THREADS": "2"})


def test_a_template_that_died_is_replaced_at_the_next_deploy(tmp_path, monkeypatch):
    monkeypatch.chdir(HERE)
    platform = LocalPlatform(tmp_path, TOKEN, handlers=HANDLER)
    try:
        dead = template_for(platform.env)
        os.kill(dead.pid, signal.SIGKILL)
        assert until(lambda: not dead.alive(), 5)
        ref = platform.deploy(FunctionId("job", Role.WORKER, 0), "node")
        assert not isinstance(ref, Failure), ref
        assert template_for(platform.env) is not dead
        assert where(ref)["pid"] == int(ref.instance)
    finally:
        platform.close()


def test_a_host_whose_handler_does_not_import_fails_its_deploy_and_logs_why(tmp_path, monkeypatch):
    monkeypatch.chdir(HERE)
    platform = LocalPlatform(tmp_path, TOKEN, handlers={Role.WORKER: "no_such_module_here:handler"})
    try:
        failure = platform.deploy(FunctionId("job", Role.WORKER, 0), "node")
    finally:
        platform.close()
    assert isinstance(failure, Failure) and failure.kind == DEPLOY
    assert failure.message == f"host did not become ready (see {tmp_path / 'job-worker-0.log'})"
    assert "No module named 'no_such_module_here'" in (tmp_path / "job-worker-0.log").read_text()


CONTROLLER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from coach.domain.identity import FunctionId, Role
    from coach.platforms.local import LocalPlatform
    from coach.platforms.template import template_for
    platform = LocalPlatform(Path(sys.argv[1]), "T", handlers={Role.WORKER: "fake_echo:handler"})
    ref = platform.deploy(FunctionId("job", Role.WORKER, 0), "node")
    print(template_for(platform.env).pid, ref.instance, flush=True)
    time.sleep(120)
""")


def test_the_template_and_its_hosts_die_with_a_controller_killed_by_sigkill(tmp_path):
    controller = subprocess.Popen([sys.executable, "-c", CONTROLLER, str(tmp_path)], cwd=HERE,
                                  stdout=subprocess.PIPE, text=True)
    try:
        template_pid, host_pid = (int(word) for word in controller.stdout.readline().split())
        assert not gone(template_pid) and not gone(host_pid)
        controller.kill()
        controller.wait(timeout=10)
        assert until(lambda: gone(template_pid) and gone(host_pid), 5)
    finally:
        if controller.poll() is None:
            controller.kill()
        controller.stdout.close()


def test_a_template_that_does_not_answer_in_time_forks_nothing_more_and_its_hosts_keep_serving(tmp_path, monkeypatch):
    monkeypatch.chdir(HERE)
    platform = LocalPlatform(tmp_path, TOKEN, handlers=HANDLER)
    try:
        first = platform.deploy(FunctionId("job", Role.WORKER, 0), "node")
        assert not isinstance(first, Failure), first
        stuck = template_for(platform.env)
        monkeypatch.setattr(template_module, "REPLY_TIMEOUT_S", 1.0)
        os.kill(stuck.pid, signal.SIGSTOP)
        try:
            late = platform.deploy(FunctionId("job", Role.WORKER, 1), "node")
        finally:
            os.kill(stuck.pid, signal.SIGCONT)
        assert isinstance(late, Failure) and late.kind == DEPLOY
        assert late.message == f"could not start the host: template process {stuck.pid} did not answer within 1 s"
        monkeypatch.setattr(template_module, "REPLY_TIMEOUT_S", 120.0)  # a new template imports MXNet first
        again = platform.deploy(FunctionId("job", Role.WORKER, 2), "node")
        assert not isinstance(again, Failure), again
        assert template_for(platform.env) is not stuck and stuck.alive()  # retired, not killed: its host serves on
        assert where(first)["pid"] == int(first.instance)
        time.sleep(1.5)  # the stuck template has read the request by now, past its deadline: it forked nothing
        assert not [p for p in Path("/proc").glob("[0-9]*") if stderr_of(p.name).endswith("/job-worker-1.log")]
    finally:
        platform.close()
