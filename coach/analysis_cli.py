"""`coach experiment`, `coach compare` and `coach report`: the analysis commands (wired into coach.cli)."""

from __future__ import annotations


def add_commands(sub) -> None:
    """Add the analysis sub-commands to the `coach` parser's subparsers."""
