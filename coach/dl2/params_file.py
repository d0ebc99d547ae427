"""Reading an MXNet parameter file (what Gluon's `save_parameters` writes) into numpy arrays, without MXNet.

Acting needs only a DL2 network's eleven small arrays, and importing MXNet to read them costs seconds of every
`coach simulate --policy dl2`. The file is MXNet's NDArray list: a header (list magic, a reserved word), the
arrays (each: its magic, storage type, shape, device, element type, then the little-endian elements) and their
names. Only what Gluon writes for dense CPU arrays is read; anything else is one ModelFileError naming the file.
Pure apart from reading the file once, with a size cap and a regular-file check (a FIFO would block, a device
would never end; coach.inputs.limits).
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from coach.dl2 import ModelFileError
from coach.inputs.limits import FileTooLarge, NotRegularFile, read_capped

#: Largest DL2 model file read, in bytes (a network of 32 hidden units is a few KiB).
MAX_MODEL_BYTES = 256 << 20
_LIST_MAGIC = 0x112
_ARRAY_MAGICS = (0xF993FAC9, 0xF993FACA)  # MXNet's NDArray formats 2 and 3 (the same layout for dense arrays)
_DENSE = 0
_DTYPES = {0: np.dtype("<f4"), 1: np.dtype("<f8"), 2: np.dtype("<f2")}
_MAX_ARRAYS = 4096
_MAX_NDIM = 8
_MAX_NAME_BYTES = 4096


class _Reader:
    """The file's bytes and a position; a read past the end is a ModelFileError."""

    def __init__(self, path: Path, data: bytes):
        self.path, self.data, self.at = path, data, 0

    def take(self, fmt: str) -> tuple:
        size = struct.calcsize(fmt)
        if self.at + size > len(self.data):
            raise ModelFileError(f"{self.path}: not an MXNet parameter file (it ends early)")
        values = struct.unpack_from(fmt, self.data, self.at)
        self.at += size
        return values

    def count(self, what: str, limit: int) -> int:
        (n,) = self.take("<Q")
        if n > limit:
            raise ModelFileError(f"{self.path}: not an MXNet parameter file ({n} {what}, at most {limit} read)")
        return n

    def array(self) -> np.ndarray:
        magic, storage = self.take("<Ii")
        if magic not in _ARRAY_MAGICS:
            raise ModelFileError(f"{self.path}: not an MXNet parameter file (array magic {magic:#x})")
        if storage != _DENSE:
            raise ModelFileError(f"{self.path}: holds a sparse array; a DL2 model's arrays are dense")
        (ndim,) = self.take("<i")
        if not 0 <= ndim <= _MAX_NDIM:
            raise ModelFileError(f"{self.path}: not an MXNet parameter file (an array of {ndim} dimensions)")
        shape = self.take(f"<{ndim}q")
        if any(d < 0 for d in shape):
            raise ModelFileError(f"{self.path}: not an MXNet parameter file (a negative dimension)")
        if ndim == 0:
            return np.zeros(0, dtype=np.float32)  # MXNet writes no more for an array of no shape
        self.take("<ii")  # the device it was saved from: CPU or not, it is read to the host
        (flag,) = self.take("<i")
        dtype = _DTYPES.get(flag)
        if dtype is None:
            raise ModelFileError(f"{self.path}: an array of element type {flag}; a DL2 model's are floating point")
        size = int(np.prod(shape, dtype=object)) * dtype.itemsize
        if self.at + size > len(self.data):
            raise ModelFileError(f"{self.path}: not an MXNet parameter file (it ends early)")
        values = np.frombuffer(self.data, dtype=dtype, count=size // dtype.itemsize, offset=self.at)
        self.at += size
        return values.reshape(shape).copy()

    def name(self) -> str:
        length = self.count("bytes in a name", _MAX_NAME_BYTES)
        if self.at + length > len(self.data):
            raise ModelFileError(f"{self.path}: not an MXNet parameter file (it ends early)")
        raw = self.data[self.at:self.at + length]
        self.at += length
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ModelFileError(f"{self.path}: not an MXNet parameter file (a name that is not UTF-8)") from None


def read_params(path: Path) -> dict[str, np.ndarray]:
    """The named arrays of the MXNet parameter file at `path`, as numpy arrays of their saved element type."""
    path = Path(path)
    try:
        data = read_capped(path, MAX_MODEL_BYTES)
    except FileNotFoundError:
        raise ModelFileError(f"{path}: no DL2 model file here") from None
    except (NotRegularFile, FileTooLarge) as error:
        raise ModelFileError(f"{path}: {error}") from None
    except OSError as error:
        raise ModelFileError(f"{path}: cannot be read ({error.strerror or error})") from None
    reader = _Reader(path, data)
    magic, _ = reader.take("<QQ")
    if magic != _LIST_MAGIC:
        raise ModelFileError(f"{path}: not an MXNet parameter file")
    arrays = [reader.array() for _ in range(reader.count("arrays", _MAX_ARRAYS))]
    names = [reader.name() for _ in range(reader.count("names", _MAX_ARRAYS))]
    if len(names) != len(arrays) or reader.at != len(data):
        raise ModelFileError(f"{path}: not an MXNet parameter file ({len(arrays)} arrays, {len(names)} names, "
                             f"{len(data) - reader.at} bytes left over)")
    return dict(zip(names, arrays))
