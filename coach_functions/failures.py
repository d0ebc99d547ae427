"""What fails the same way on any instance (EpochError, answered 422), the log every failure goes to, and what
tells an epoch broken from outside its job.

Side effects: writes to stderr (file descriptor 2), the function's log, and reads it back.
"""

from __future__ import annotations

import os
import stat
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


#: What ps-lite writes before it aborts the process on a message that is not ps-lite's: any bytes a process outside
#: the job sent to the node's port (an HTTP request, a port scan), e.g. `van.cc:520: Check failed:
#: pb.ParseFromArray(meta_buf, buf_size): failed to parse string into protobuf`.
FOREIGN_MARKS = ("failed to parse string into protobuf",)
LOG_TAIL_BYTES = 64 * 1024  # how much of the log a dead child's failure is looked for in


def log_size() -> int | None:
    """Where the function's log (stderr) ends now, when it is a file: a child forked now writes after it."""
    try:
        status = os.fstat(2)
    except OSError:
        return None
    return status.st_size if stat.S_ISREG(status.st_mode) else None


def broken_from_outside(log_from: int | None) -> bool:
    """Whether the function's log, since `log_from` (`log_size()` when the dead child was forked), says that ps-lite
    aborted on bytes from outside the job. Only a log that is a file can say (the embedded platform's)."""
    if log_from is None:
        return False
    try:
        fd = os.open("/proc/self/fd/2", os.O_RDONLY | os.O_CLOEXEC)  # the log is opened for appending only
    except OSError:
        return False
    try:
        end = os.fstat(fd).st_size
        start = max(log_from, end - LOG_TAIL_BYTES)
        text = os.pread(fd, end - start, start).decode(errors="replace") if end > start else ""
    except OSError:
        return False
    finally:
        os.close(fd)
    return any(mark in text for mark in FOREIGN_MARKS)
