"""Reader (and writer) of the IDX format of MNIST and Fashion-MNIST.

An IDX file is a 4-byte magic number ``00 00 <type> <ndim>``, then ``ndim`` big-endian ``uint32``
dimensions, then the values in C order (big-endian for multi-byte types). Files may be gzipped
(``.gz``, as distributed). The reader checks the magic number and that the payload has exactly
``prod(dims) * itemsize`` bytes, so a truncated or padded file is an error naming the file, never a
silently shorter dataset; a truncated ``.gz`` fails gzip's own length/CRC check.

Example:
    >>> import numpy as np, tempfile
    >>> path = Path(tempfile.mkdtemp()) / "tiny-images-idx3-ubyte.gz"
    >>> write_idx(path, np.arange(24, dtype=np.uint8).reshape(2, 3, 4))
    >>> read_idx(path).shape
    (2, 3, 4)
"""

from __future__ import annotations

import gzip
import struct
import zlib
from pathlib import Path

import numpy as np

from lightning_fl.datamodules.downloads import CorruptDataError, DataNotFoundError

__all__ = ["IDX_TYPES", "parse_idx", "read_idx", "read_raw", "write_idx"]

#: IDX type byte -> numpy dtype (big-endian where it matters).
IDX_TYPES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_CODES = {dtype.newbyteorder(">") if dtype.itemsize > 1 else dtype: code for code, dtype in IDX_TYPES.items()}


def read_raw(path: str | Path) -> bytes:
    """The bytes of ``path``, decompressed when it ends in ``.gz``.

    Raises:
        DataNotFoundError: If the file does not exist.
        CorruptDataError: If a ``.gz`` file is truncated or fails its CRC check.
    """
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(f"{path} not found")
    if path.suffix != ".gz":
        return path.read_bytes()
    try:
        with gzip.open(path, "rb") as stream:
            return stream.read()
    except (EOFError, OSError, zlib.error) as err:
        raise CorruptDataError(f"{path}: damaged gzip file ({err}); delete it and fetch it again") from err


def parse_idx(buffer: bytes, name: str = "<bytes>") -> np.ndarray:
    """Decode one IDX buffer into a native-endian numpy array.

    Args:
        buffer: The (decompressed) file contents.
        name: File name used in error messages.

    Raises:
        CorruptDataError: For a bad magic number, an unknown type byte, or a payload whose length is
            not ``prod(dims) * itemsize`` (truncated or padded file).

    Example:
        >>> parse_idx(bytes([0, 0, 8, 1, 0, 0, 0, 3, 7, 8, 9])).tolist()
        [7, 8, 9]
    """
    if len(buffer) < 4:
        raise CorruptDataError(f"{name}: {len(buffer)} bytes, too short for an IDX header (truncated)")
    zero, code, ndim = struct.unpack(">HBB", buffer[:4])
    if zero != 0 or code not in IDX_TYPES or ndim == 0:
        raise CorruptDataError(
            f"{name}: not an IDX file (magic number {buffer[:4].hex()}; expected 0000 then a type byte in"
            f" {', '.join(f'{c:02x}' for c in IDX_TYPES)} and ndim >= 1)")
    header = 4 + 4 * ndim
    if len(buffer) < header:
        raise CorruptDataError(f"{name}: truncated IDX header ({len(buffer)} of {header} bytes)")
    dims = struct.unpack(f">{ndim}I", buffer[4:header])
    dtype = IDX_TYPES[code]
    expected = header + int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if len(buffer) != expected:
        state = "truncated" if len(buffer) < expected else "has trailing bytes"
        raise CorruptDataError(
            f"{name}: {state}: {len(buffer)} bytes, expected {expected} for shape {tuple(dims)} of {dtype.name}")
    array = np.frombuffer(buffer, dtype=dtype, offset=header).reshape(dims)
    return array.astype(dtype.newbyteorder("="), copy=False) if dtype.itemsize > 1 else array


def read_idx(path: str | Path, expected_shape: tuple[int, ...] | None = None) -> np.ndarray:
    """Read an IDX file (``.gz`` or raw) and optionally check its shape.

    Raises:
        DataNotFoundError: If the file does not exist.
        CorruptDataError: If the file is damaged (see :func:`parse_idx`) or its shape is not
            ``expected_shape``.
    """
    array = parse_idx(read_raw(path), str(path))
    if expected_shape is not None and tuple(array.shape) != tuple(expected_shape):
        raise CorruptDataError(f"{path}: shape {tuple(array.shape)}, expected {tuple(expected_shape)}")
    return array


def write_idx(path: str | Path, array: np.ndarray) -> None:
    """Write ``array`` as an IDX file (gzipped when ``path`` ends in ``.gz``); for tests and tools.

    Raises:
        ValueError: If the dtype has no IDX type code or the array is 0-dimensional.
    """
    array = np.asarray(array)
    dtype = array.dtype.newbyteorder(">") if array.dtype.itemsize > 1 else array.dtype
    if dtype not in _CODES or array.ndim == 0:
        raise ValueError(f"cannot write dtype {array.dtype} / ndim {array.ndim} as IDX")
    payload = struct.pack(">HBB", 0, _CODES[dtype], array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    payload += np.ascontiguousarray(array, dtype=dtype).tobytes()
    path = Path(path)
    if path.suffix == ".gz":
        with gzip.open(path, "wb") as stream:
            stream.write(payload)
    else:
        path.write_bytes(payload)
