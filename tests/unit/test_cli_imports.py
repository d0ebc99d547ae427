"""The commands a user runs often start without importing MXNet (seconds of start-up): the names their parsers
offer are kept in light modules, and these tests check that they agree with the heavy ones."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def test_the_reward_names_the_parser_offers_are_the_trainers():
    from coach.dl2.learn_run import REWARDS
    from coach.dl2.run_policy import REWARD_NAMES

    assert sorted(REWARD_NAMES) == sorted(REWARDS)


@pytest.mark.parametrize("argv", [["--version"], ["validate", "/nonexistent.yaml"], ["status", "--help"],
                                  ["submit", "--help"], ["stop", "--help"]])
def test_a_light_command_imports_no_mxnet(argv):
    probe = ("import sys\nfrom coach.ui.cli import main\ntry:\n    main(%r)\nexcept SystemExit:\n    pass\n"
             "print('mxnet' in sys.modules)" % (argv,))
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "False", (done.stdout, done.stderr[-500:])


@pytest.mark.parametrize("level", ["run", "cluster"])
def test_train_policy_refuses_a_broken_checkpoint_before_importing_mxnet(tmp_path, level):
    """`--resume` with a checkpoint whose state is not JSON: one line naming the file, exit 2, in a fraction of
    the seconds the trainers take to import."""
    folder = tmp_path / "model.params.ckpt"
    folder.mkdir()
    (folder / "state.json").write_text("{not json")
    argv = ["train-policy", "--level", level, "--imitate", "coach" if level == "run" else "drf", "--out",
            str(tmp_path / "model.params"), "--resume", "--quiet"]
    probe = ("import sys\nfrom coach.ui.cli import main\ntry:\n    code = main(%r)\nexcept SystemExit as exit:\n"
             "    code = exit.code\nprint(code, 'mxnet' in sys.modules)" % (argv,))
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "2 False", (done.stdout, done.stderr[-500:])
    assert done.stderr.strip() == f"{folder / 'state.json'}: (file): not a checkpoint's state (JSONDecodeError)"


@pytest.mark.parametrize("closed", ["stdout", "stderr"])
@pytest.mark.parametrize("argv, code", [(["simulate", "/nonexistent.csv", "--policy", "fifo"], 2),
                                        (["validate", "/nonexistent.yaml"], 2), (["--version"], 0)])
def test_a_closed_standard_stream_changes_no_exit_code(tmp_path, closed, argv, code):
    """`coach ... >&-` or `2>&-`: Python leaves sys.stdout or sys.stderr None; the command's exit code is the one
    it would give with the stream open (its output is lost, as asked), never 1 from a crash on the missing
    stream."""
    stream = {"stdout": 1, "stderr": 2}[closed]
    done = subprocess.run([sys.executable, "-c", "import sys; from coach.ui.cli import main; sys.exit(main(sys.argv[1:]))",
                           *argv], cwd=tmp_path, stdin=subprocess.DEVNULL, timeout=120,
                          **({"stdout": subprocess.DEVNULL} if stream == 2 else {"stderr": subprocess.DEVNULL}),
                          preexec_fn=lambda: os.close(stream))
    assert done.returncode == code
