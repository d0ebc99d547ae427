"""Where a DL2 training's checkpoint lives and how its files are read back, without MXNet: `coach train-policy
--resume` refuses a broken checkpoint before it spends seconds importing the trainers.

A checkpoint folder `<out>.ckpt/` holds state.json (the training's place and figures), net.params and
trainer.states (MXNet's files, loaded by the trainers by path), and once imitation is over imitation.params (the
network it left, copied beside the model only when the whole training ends) and, at the run level, best.params.
Reading it checks what can be checked here: state.json is a bounded regular file holding JSON of this version, and
the others are bounded regular files.
"""

from __future__ import annotations

import json
import os
from dataclasses import fields
from pathlib import Path
from typing import Any

from coach.dl2.params_file import MAX_MODEL_BYTES
from coach.inputs.limits import MAX_STATE_BYTES, FileTooLarge, NotRegularFile, file_problem, open_regular, read_capped

CHECKPOINT_VERSION = 2  # 2: the optimiser's state as MXNet arrays, not pickled (save_trainer)
#: The network imitation left, kept in the checkpoint until the model, its report and this twin are written together
IMITATION = "imitation.params"
#: Every file a checkpoint folder may hold; the last two only once their phase has written them
CHECKPOINT_FILES = ("state.json", "net.params", "trainer.states", IMITATION, "best.params")


def checkpoint_dir(out: Path) -> Path:
    return out.with_name(out.name + ".ckpt")


def jsonable(value):
    return list(value) if isinstance(value, tuple) else value


def stored_state(folder: Path) -> dict | None:
    """The state of the checkpoint in `folder`, None without one; ValueError (one line naming the file) when a file
    is not a bounded regular file, state.json is not JSON, or it was written by another version."""
    path = folder / "state.json"
    if not path.exists():
        return None
    state = _read_state(path)
    for name in CHECKPOINT_FILES[1:]:  # what the trainers load next, by path, with MXNet, or copy
        if name in CHECKPOINT_FILES[3:] and not os.path.lexists(folder / name):
            continue
        try:
            open_regular(folder / name, MAX_MODEL_BYTES).close()
        except (FileTooLarge, NotRegularFile, OSError) as error:
            raise ValueError(f"{folder / name}: (file): {file_problem(error)}") from None
    if not isinstance(state, dict) or state.get("version") != CHECKPOINT_VERSION:
        state = state if isinstance(state, dict) else {}
        raise ValueError(f"{path}: checkpoint version {state.get('version')!r}, expected {CHECKPOINT_VERSION}")
    return state


def load_checkpoint(folder: Path, settings) -> dict | None:
    """stored_state, and a ValueError when it was made under other `settings` (a frozen dataclass: every field
    must match)."""
    state = stored_state(folder)
    if state is None:
        return None
    saved = state.get("settings", {})
    differs = [f.name for f in fields(settings) if jsonable(getattr(settings, f.name)) != saved.get(f.name)]
    if differs:
        raise ValueError(f"{folder / 'state.json'}: made with other settings ({', '.join(differs)}); resume with "
                         f"the same ones, or delete {folder}")
    return state


def _read_state(path: Path) -> Any:
    """state.json's value, read under MAX_STATE_BYTES (regular files only); ValueError naming the file."""
    try:
        return json.loads(read_capped(path, MAX_STATE_BYTES).decode("utf-8"))
    except (FileTooLarge, NotRegularFile, OSError) as error:
        raise ValueError(f"{path}: (file): {file_problem(error)}") from None
    except (ValueError, RecursionError) as error:
        raise ValueError(f"{path}: (file): not a checkpoint's state ({type(error).__name__})") from None
