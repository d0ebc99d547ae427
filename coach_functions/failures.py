"""What fails the same way on any instance (EpochError, answered 422), and the log every failure goes to.

Side effects: writes to stderr (file descriptor 2), the function's log.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any, Callable


class EpochError(Exception):
    """A request that fails the same way on any instance: a broken model file or broken data. Answered 422
    (`rejected`, never retried), also when raised in the epoch child; the message names the model file."""


def log_failure(header: str, error: BaseException | None = None) -> None:
    """Write `header` and the traceback of `error` (the one being handled) to stderr, the function's log, now.

    Straight to file descriptor 2: a forked epoch child must not leave it in a buffer it never flushes, nor
    flush a copy of its parent's."""
    text = header.rstrip("\n") + "\n"
    if error is not None:
        text += "".join(traceback.format_exception(type(error), error, error.__traceback__))
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    data = text.encode(errors="replace")
    while data:
        try:
            data = data[os.write(2, data):]
        except OSError:  # no stderr: nothing more to do
            return


def user_code(model_path: str, what: str, call: Callable[[], Any]) -> Any:
    """`call()`, code of the model file: whatever it raises is logged with its traceback and becomes an EpochError
    (`model file PATH: load_data() raised ValueError: ...`). A model file that calls sys.exit() is no exception."""
    try:
        return call()
    except (Exception, SystemExit) as error:
        message = f"model file {model_path}: {what} raised {type(error).__name__}: {error}"
        log_failure(f"{message.splitlines()[0]}; its traceback:", error)
        raise EpochError(message) from None
