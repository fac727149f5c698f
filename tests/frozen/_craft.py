"""Helpers that build hostile or edited `.nbc` files from a valid one (valid digests unless
the point is a bad digest), so each loader check can be reached on purpose."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

from nbcompile.frozen import _format


def split(data: bytes) -> tuple[bytes, bytes, bytes]:
    return _format.unpack_unchecked(data)


def repack(
    data: bytes,
    *,
    manifest: bytes | None = None,
    weights: bytes | None = None,
    program: bytes | None = None,
    version: int = _format.FORMAT_VERSION,
) -> bytes:
    m, w, p = split(data)
    return _format.pack(
        m.rstrip(b" ") if manifest is None else manifest,
        w if weights is None else weights,
        p if program is None else program,
        format_version=version,
    )


def edit_manifest(data: bytes, edit: Callable[[dict[str, Any]], None]) -> bytes:
    manifest = json.loads(split(data)[0])
    edit(manifest)
    return repack(data, manifest=json.dumps(manifest).encode())


def weights_raw(header: bytes | str, buffer: bytes, length: int | None = None) -> bytes:
    """A weight section from a literal JSON header (str/bytes) and a data buffer."""
    head = header.encode() if isinstance(header, str) else header
    n = len(head) if length is None else length
    return struct.pack("<Q", n) + head + buffer


def weights_json(entries: dict[str, Any], buffer: bytes) -> bytes:
    return weights_raw(json.dumps(entries), buffer)


def flip(data: bytes, offset: int) -> bytes:
    out = bytearray(data)
    out[offset] ^= 0x40
    return bytes(out)


def section_offset(data: bytes, index: int) -> tuple[int, int]:
    """(offset, length) of section ``index`` (0 manifest, 1 weights, 2 program)."""
    _, _, off, length, _ = struct.unpack_from("<4sIQQ32s", data, 24 + 56 * index)
    return off, length
