"""The commands a user runs often start without importing MXNet (seconds of start-up): the names their parsers
offer are kept in light modules, and these tests check that they agree with the heavy ones."""

from __future__ import annotations

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
