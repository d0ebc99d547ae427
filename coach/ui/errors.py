"""Bad input on the command line: one exit code, one exception and one way to print it.

Why this module exists: every `coach` sub-command (coach.ui.cli and coach.ui.analysis_cli) refuses bad input the
same way, by printing one `WHERE: FIELD: what is wrong` line per problem on stderr and exiting with 2 before
anything is started or written.

Side effects: `fail` writes to stderr; nothing else here has any.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

#: Exit code of a command refused for bad input (nothing was started or written).
EXIT_BAD_INPUT = 2


class BadInput(Exception):
    """Input that must be refused before anything runs; `lines` are the one-line errors to print."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


def fail(lines: Iterable[str]) -> int:
    """Print each line on stderr and return EXIT_BAD_INPUT, for `return fail([...])` in a command."""
    for line in lines:
        print(line, file=sys.stderr)
    return EXIT_BAD_INPUT
