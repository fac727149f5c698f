"""The weight section: safetensors layout, written and parsed here with strict checks.

Layout (the safetensors rules): 8-byte little-endian header length N (capped), N bytes of
UTF-8 JSON (``{"name": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, ...}``, optional
``"__metadata__"`` of strings, padded with spaces), then the byte buffer. Offsets are relative to
the buffer, contiguous, without holes or overlaps, and the last tensor ends at the end of the
section. The parser never trusts a length before comparing it with the section size, and only
then hands bytes to NumPy (``np.frombuffer``: a view, no copy).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from nbcompile.errors import FreezeError

MAX_HEADER_BYTES = 100_000_000  # the safetensors cap
MAX_RANK = 32
_I64_MAX = (1 << 63) - 1

#: safetensors dtype code -> NumPy dtype (the only dtypes a weight section may hold).
DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype(np.float64),
    "F32": np.dtype(np.float32),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "C64": np.dtype(np.complex64),
    "I64": np.dtype(np.int64),
    "I32": np.dtype(np.int32),
    "I16": np.dtype(np.int16),
    "I8": np.dtype(np.int8),
    "U64": np.dtype(np.uint64),
    "U32": np.dtype(np.uint32),
    "U16": np.dtype(np.uint16),
    "U8": np.dtype(np.uint8),
    "BOOL": np.dtype(np.bool_),
}
CODES: dict[str, str] = {dt.name: code for code, dt in DTYPES.items()}


@dataclass(frozen=True)
class TensorInfo:
    """One tensor entry of a weight section (offsets relative to the section start)."""

    name: str
    dtype: str  # NumPy name, e.g. "float32"
    shape: tuple[int, ...]
    start: int
    end: int


def _bad(message: str) -> FreezeError:
    return FreezeError(f"weights section: {message}", code="NBC500")


def dtype_code(dtype: np.dtype) -> str:
    """The safetensors code of a NumPy dtype, or FreezeError NBC506 if it cannot be stored."""
    code = CODES.get(np.dtype(dtype).name)
    if code is None:
        raise FreezeError(f"dtype {np.dtype(dtype).name} cannot be stored", code="NBC506")
    return code


def layout(tensors: Sequence[tuple[str, np.ndarray]]) -> tuple[bytes, list[int]]:
    """Header bytes (length prefix included) and the storage order of ``tensors``.

    Tensors are stored by decreasing item size so every tensor stays aligned without padding.
    """
    order = sorted(range(len(tensors)), key=lambda i: (-tensors[i][1].dtype.itemsize, i))
    header: dict[str, object] = {"__metadata__": {"format": "nbcompile"}}
    offset = 0
    for i in order:
        name, arr = tensors[i]
        header[name] = {
            "dtype": dtype_code(arr.dtype),
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + arr.nbytes],
        }
        offset += arr.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    return struct.pack("<Q", len(text)) + text, order


def chunks(tensors: Sequence[tuple[str, np.ndarray]]) -> Iterator[bytes | memoryview]:
    """Yield the whole weight section: header then each tensor's little-endian bytes."""
    head, order = layout(tensors)
    yield head
    for i in order:
        arr = tensors[i][1]
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        yield memoryview(np.ascontiguousarray(arr).reshape(-1).view(np.uint8))


def encode(tensors: Sequence[tuple[str, np.ndarray]]) -> bytes:
    """The weight section as one bytes object."""
    return b"".join(bytes(c) for c in chunks(tensors))


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    seen: dict[str, object] = {}
    for key, value in pairs:
        if key in seen:
            raise _bad(f"duplicate tensor name {key!r}")
        seen[key] = value
    return seen


def _reject_constant(name: str) -> object:
    raise _bad(f"non-finite JSON number {name}")


def _int(value: object, what: str) -> int:
    if type(value) is not int or value < 0 or value > _I64_MAX:
        raise _bad(f"{what} must be an integer in [0, 2^63), got {value!r}")
    return value


def _entry(name: str, raw: object, buffer_len: int) -> TensorInfo:
    if not isinstance(raw, dict) or set(raw) != {"dtype", "shape", "data_offsets"}:
        raise _bad(f"tensor {name!r}: entry must have exactly dtype, shape and data_offsets")
    code = raw["dtype"]
    if not isinstance(code, str) or code not in DTYPES:
        raise _bad(f"tensor {name!r}: unknown dtype {code!r}")
    shape = raw["shape"]
    if not isinstance(shape, list) or len(shape) > MAX_RANK:
        raise _bad(f"tensor {name!r}: shape must be a list of at most {MAX_RANK} dims")
    dims = tuple(_int(d, f"tensor {name!r}: dim") for d in shape)
    offsets = raw["data_offsets"]
    if not isinstance(offsets, list) or len(offsets) != 2:
        raise _bad(f"tensor {name!r}: data_offsets must be [begin, end]")
    begin, end = (_int(o, f"tensor {name!r}: offset") for o in offsets)
    if begin > end or end > buffer_len:
        raise _bad(f"tensor {name!r}: data_offsets [{begin}, {end}] outside the data buffer")
    nbytes = DTYPES[code].itemsize
    for d in dims:
        nbytes *= d
        if nbytes > _I64_MAX:
            raise _bad(f"tensor {name!r}: shape {list(dims)} overflows (product of dims)")
    if nbytes != end - begin:
        raise _bad(f"tensor {name!r}: shape {list(dims)} needs {nbytes} bytes, has {end - begin}")
    return TensorInfo(name, DTYPES[code].name, dims, begin, end)


def parse(section: memoryview) -> tuple[list[TensorInfo], int]:
    """Strictly parse a weight section header; return tensors (by offset) and the data start."""
    size = len(section)
    if size < 8:
        raise _bad(f"{size} bytes, too short for the 8-byte header length")
    (n,) = struct.unpack_from("<Q", section, 0)
    if n > MAX_HEADER_BYTES or n > size - 8:
        raise _bad(f"header length {n} exceeds the section ({size - 8} bytes after the length)")
    raw = bytes(section[8 : 8 + n])
    if not raw.startswith(b"{"):
        raise _bad("header is not a JSON object")
    try:
        text = raw.decode("utf-8")
        header = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except FreezeError:
        raise
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise _bad(f"header is not valid UTF-8 JSON ({type(err).__name__})") from None
    if not isinstance(header, dict):
        raise _bad("header is not a JSON object")
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in meta.items()
    ):
        raise _bad("__metadata__ must map strings to strings")
    buffer_len = size - 8 - n
    infos = sorted(
        (_entry(name, raw_entry, buffer_len) for name, raw_entry in header.items()),
        key=lambda t: (t.start, t.end),
    )
    position = 0
    for info in infos:
        if info.start != position:
            kind = "overlap" if info.start < position else "hole"
            raise _bad(f"tensor {info.name!r}: data {kind} at offset {min(info.start, position)}")
        position = info.end
    if position != buffer_len:
        raise _bad(f"{buffer_len - position} bytes after the last tensor (trailing garbage)")
    return infos, 8 + n


def arrays(
    section: memoryview, infos: Sequence[TensorInfo], data_start: int
) -> dict[str, np.ndarray]:
    """Read-only NumPy views of checked tensors (little-endian, no copy)."""
    out = {}
    for info in infos:
        dtype = np.dtype(DTYPES[CODES[info.dtype]]).newbyteorder("<")
        buf = section[data_start + info.start : data_start + info.end]
        count = (info.end - info.start) // dtype.itemsize if dtype.itemsize else 0
        array = np.frombuffer(buf, dtype=dtype, count=count).reshape(info.shape)
        array.flags.writeable = False
        out[info.name] = array
    return out
