"""Bad input on the command line: one exit code, one exception and one way to print it.

Why this module exists: every `coach` sub-command (coach.ui.cli and coach.ui.analysis_cli) refuses bad input the
same way, by printing one `WHERE: FIELD: what is wrong` line per problem on stderr and exiting with 2 before
anything is started or written. A malformed option is refused by argparse itself, through `Parser` (one
`coach CMD: error: argument --OPTION: what is wrong` line, no usage block) and the bounded, finite option types
`integer` and `number`.

Side effects: `fail` and `Parser.error` write to stderr; nothing else here has any.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Callable, NoReturn

from coach.inputs.limits import one_line, short

#: Exit code of a command refused for bad input (nothing was started or written).
EXIT_BAD_INPUT = 2
#: Exit code of a command stopped by Ctrl-C or SIGTERM.
EXIT_INTERRUPTED = 130
#: Exit code of a command this installation cannot run: an optional extra it needs is not installed.
EXIT_MISSING_EXTRA = 3
#: Longest error line printed, and most lines printed for one refusal.
MAX_LINE_CHARS = 1000
MAX_LINES = 100


class BadInput(Exception):
    """Input that must be refused before anything runs; `lines` are the one-line errors to print."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


def fail(lines: Iterable[str]) -> int:
    """Print each line on stderr and return EXIT_BAD_INPUT, for `return fail([...])` in a command.

    Each line is kept on one line and cut at MAX_LINE_CHARS; past MAX_LINES lines, one last line says how many
    more problems there were.
    """
    lines = list(lines)
    for line in lines[:MAX_LINES]:
        print(one_line(str(line), MAX_LINE_CHARS), file=sys.stderr)
    if len(lines) > MAX_LINES:
        print(f"... and {len(lines) - MAX_LINES} more problems", file=sys.stderr)
    return EXIT_BAD_INPUT


class LazyChoices:
    """argparse `choices=` read from a registry only when an option is parsed or its help shown, so that building
    the parser imports no registry (and `coach --version`, `coach scheduler` need none of MXNet's stack)."""

    def __init__(self, names: Callable[[], Iterable[str]]):
        self._names = names
        self._loaded: list[str] | None = None

    def _load(self) -> list[str]:
        if self._loaded is None:
            self._loaded = sorted(self._names())
        return self._loaded

    def __contains__(self, value: object) -> bool:
        return value in self._load()

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors are one line on stderr (`PROG: error: MESSAGE`) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, one_line(f"{self.prog}: error: {message}", MAX_LINE_CHARS) + "\n")


def integer(low: int, high: int) -> Callable[[str], int]:
    """An argparse `type=`: a whole number in [low, high]; anything else is argparse's one-line error (exit 2)."""

    def parse(text: str) -> int:
        try:
            value = int(text, 10) if len(text) <= 40 else None
        except ValueError:
            value = None
        if value is None:
            raise argparse.ArgumentTypeError(f"expected an integer, got {short(text)}")
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        if value > high:
            raise argparse.ArgumentTypeError(f"must be <= {high}, got {value}")
        return value

    parse.__name__ = "integer"
    return parse


def number(low: float, high: float, *, low_exclusive: bool = False) -> Callable[[str], float]:
    """An argparse `type=`: a finite number in [low, high] (or (low, high]); never nan or inf."""

    def parse(text: str) -> float:
        try:
            value = float(text) if len(text) <= 64 else None
        except ValueError:
            value = None
        if value is None:
            raise argparse.ArgumentTypeError(f"expected a number, got {short(text)}")
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {short(text)}")
        if (value <= low) if low_exclusive else (value < low):
            raise argparse.ArgumentTypeError(f"must be {'>' if low_exclusive else '>='} {low:g}, got {value:g}")
        if value > high:
            raise argparse.ArgumentTypeError(f"must be <= {high:g}, got {value:g}")
        return value

    parse.__name__ = "number"
    return parse


def http_url(text: str) -> str:
    """An argparse `type=`: an http:// or https:// URL with a host (and a port that is a number); anything else is
    argparse's one-line error naming the option (exit 2)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(text) if len(text) <= 2000 else None
        port_ok = parts is not None and (parts.port is None or 0 < parts.port)
    except ValueError:  # a port that is not a number, or out of range
        parts, port_ok = None, False
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or not port_ok \
            or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError(f"expected http://HOST:PORT or https://HOST:PORT, got {short(text)}")
    return text


http_url.__name__ = "URL"


MAX_PATH_BYTES = 4096  # Linux's PATH_MAX
MAX_NAME_BYTES = 255  # and NAME_MAX: one component of a path


def path_text(text: str) -> str:
    """An argparse `type=` for a file or folder the user names: not empty (which would mean the current folder),
    no NUL, within the lengths the file system takes; anything else is argparse's one-line error naming the
    option (exit 2), not a file error about some path later."""
    raw = os.fsencode(text)
    if not raw.strip():
        raise argparse.ArgumentTypeError("expected a path, got an empty one")
    if b"\0" in raw:
        raise argparse.ArgumentTypeError(f"expected a path, got one with a NUL byte: {short(text)}")
    if len(raw) > MAX_PATH_BYTES:
        raise argparse.ArgumentTypeError(f"a path of {len(raw)} bytes, longer than {MAX_PATH_BYTES} (the limit)")
    longest = max(len(part) for part in raw.split(b"/"))
    if longest > MAX_NAME_BYTES:
        raise argparse.ArgumentTypeError(f"a name of {longest} bytes in {short(text)}, longer than "
                                         f"{MAX_NAME_BYTES} (the limit)")
    return text


path_text.__name__ = "path"


def percent(low: float, high: float) -> Callable[[str], float]:
    """An argparse `type=`: `10%` or `10` (percent, finite, in (low, high]) -> the fraction 0.1."""
    as_number = number(low, high, low_exclusive=True)

    def parse(text: str) -> float:
        return as_number(text[:-1] if text.endswith("%") else text) / 100

    parse.__name__ = "percent"
    return parse
