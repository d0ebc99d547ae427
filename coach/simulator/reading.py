"""Reading the simulator's input files: size-capped, regular files only, every failure one `FILE:0:0:` line.

A FIFO would block and a sparse file would fill memory, so both are refused before anything is read.
"""

from __future__ import annotations

from pathlib import Path

from coach.inputs.limits import FileTooLarge, NotRegularFile, read_capped


def read_input(path: Path, max_bytes: int, error: type[ValueError]) -> bytes:
    """The file's bytes, or `error("FILE:0:0: what is wrong")`."""
    try:
        return read_capped(path, max_bytes)
    except FileNotFoundError:
        raise error(f"{path}:0:0: no such file") from None
    except (FileTooLarge, NotRegularFile) as exc:
        raise error(f"{path}:0:0: {exc}") from None
    except OSError as exc:
        raise error(f"{path}:0:0: cannot read ({exc.strerror or exc})") from None
