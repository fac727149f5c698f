"""The `.nbc` container: fixed binary header, section table with SHA-256 digests, atomic writes.

Layout (all integers little-endian; see ``docs/format.md``)::

    0    8   magic  b"\\x89NBC\\r\\n\\x1a\\n"
    8    4   format version (u32)           -- bytes 0..11 keep this meaning in every version
    12   4   section count (u32) = 3
    16   8   total file size (u64)
    24   168 3 section entries of 56 bytes: kind[4] flags(u32)=0 offset(u64) length(u64) sha256[32]
    192  32  SHA-256 of bytes 0..191
    224  ...  sections MANI (JSON manifest), WGHT (safetensors layout), PROG (jax.export bytes),
              contiguous, in this order, the last one ending at end of file.

Readers check, in order: size bounds, magic, version, header digest, section table, section
digests. Nothing is allocated from a length read in the file before it is checked against the
real file size.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from nbcompile.errors import FreezeError

# Format version history (bump on any change a version-1 reader would misread):
#   Version 1, 2026-11-30: first version. Header 224 bytes, sections MANI/WGHT/PROG,
#     manifest schema 1 (docs/format.md), weights in safetensors layout, program =
#     jax.export serialization (flatbuffer) of a function of flat array arguments.
#   Version 1, 2026-11-30 (addition, version unchanged): input/output signature shapes may
#     hold the string "b", a symbolic batch dimension (leading dimension of inputs; anywhere in
#     outputs; never in weights). Files without it are read as before; readers of version 1
#     from this date accept both.
FORMAT_VERSION = 1
MIN_FORMAT_VERSION = 1

MAGIC = b"\x89NBC\r\n\x1a\n"
SECTION_KINDS = (b"MANI", b"WGHT", b"PROG")
SECTION_NAMES = {b"MANI": "manifest", b"WGHT": "weights", b"PROG": "program"}
_ENTRY = struct.Struct("<4sIQQ32s")
_FIXED = struct.Struct("<8sIIQ")
HEADER_SIZE = _FIXED.size + len(SECTION_KINDS) * _ENTRY.size + 32  # 224
WEIGHTS_ALIGN = 64
MAX_MANIFEST_BYTES = 16 * 1024 * 1024
MAX_FILE_BYTES = 1 << 40  # 1 TiB: anything larger is refused before reading


def _malformed(message: str, hint: str | None = None) -> FreezeError:
    return FreezeError(message, code="NBC500", hint=hint)


@dataclass(frozen=True)
class Sections:
    """The checked sections of a container (views into the file bytes, no copies)."""

    format_version: int
    manifest: memoryview
    weights: memoryview
    program: memoryview
    file_bytes: int


def _header(version: int, file_size: int, entries: list[tuple[bytes, int, int, bytes]]) -> bytes:
    head = _FIXED.pack(MAGIC, version, len(entries), file_size)
    head += b"".join(
        _ENTRY.pack(kind, 0, off, length, digest) for kind, off, length, digest in entries
    )
    return head + hashlib.sha256(head).digest()


def pad_manifest(manifest: bytes) -> bytes:
    """Pad JSON with spaces so the weight section starts on a ``WEIGHTS_ALIGN`` boundary."""
    end = HEADER_SIZE + len(manifest)
    return manifest + b" " * (-end % WEIGHTS_ALIGN)


def pack(
    manifest: bytes, weights: bytes, program: bytes, *, format_version: int = FORMAT_VERSION
) -> bytes:
    """Assemble a whole container in memory (tests and small files; `write_atomic` streams)."""
    manifest = pad_manifest(manifest)
    entries, offset = [], HEADER_SIZE
    for kind, body in zip(SECTION_KINDS, (manifest, weights, program), strict=True):
        entries.append((kind, offset, len(body), hashlib.sha256(body).digest()))
        offset += len(body)
    return _header(format_version, offset, entries) + manifest + weights + program


def unpack_unchecked(data: bytes) -> tuple[bytes, bytes, bytes]:
    """Split a well-formed container into (manifest, weights, program) without digest checks."""
    entries = [_ENTRY.unpack_from(data, _FIXED.size + i * _ENTRY.size) for i in range(3)]
    return tuple(bytes(data[off : off + length]) for _, _, off, length, _ in entries)  # type: ignore[return-value]


def write_atomic(
    path: str | os.PathLike[str],
    manifest: bytes,
    weight_chunks: Callable[[], Iterable[bytes | memoryview]],
    program: bytes,
) -> int:
    """Stream a container to a temp file in the target folder, then ``os.replace`` it.

    ``weight_chunks`` is called once and yields the weight section piece by piece, so a large
    model is never held twice in memory. On any failure the temp file is removed and an
    existing file at ``path`` is left untouched. Returns the file size.
    """
    target = Path(path)
    manifest = pad_manifest(manifest)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, _file_mode(target))
        with os.fdopen(fd, "wb") as out:
            out.write(b"\0" * HEADER_SIZE)
            entries, offset = [], HEADER_SIZE
            out.write(manifest)
            entries.append((b"MANI", offset, len(manifest), hashlib.sha256(manifest).digest()))
            offset += len(manifest)
            digest, length = hashlib.sha256(), 0
            for chunk in weight_chunks():
                out.write(chunk)
                digest.update(chunk)
                length += len(chunk)
            entries.append((b"WGHT", offset, length, digest.digest()))
            offset += length
            out.write(program)
            entries.append((b"PROG", offset, len(program), hashlib.sha256(program).digest()))
            offset += len(program)
            out.seek(0)
            out.write(_header(FORMAT_VERSION, offset, entries))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return offset


def _file_mode(target: Path) -> int:
    """Keep an existing file's permissions; new files get 0o666 minus the umask (not 0o600)."""
    try:
        return target.stat().st_mode & 0o777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def read_file(path: str | os.PathLike[str]) -> bytes:
    """Read a container file whole, refusing sizes outside the format's bounds first."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < HEADER_SIZE:
            raise _malformed(
                f"file is {size} bytes, smaller than the {HEADER_SIZE}-byte .nbc header",
                "the file is empty or truncated; freeze the model again",
            )
        if size > MAX_FILE_BYTES:
            raise _malformed(f"file is {size} bytes, above the {MAX_FILE_BYTES}-byte limit")
        data = f.read(size + 1)
    if len(data) != size:
        raise _malformed("the file changed size while being read")
    return data


def check_sections(data: bytes) -> Sections:
    """Check size, magic, version, header digest, table and section digests; return sections."""
    size = len(data)
    if size < HEADER_SIZE:
        raise _malformed(f"file is {size} bytes, smaller than the {HEADER_SIZE}-byte .nbc header")
    magic, version, count, declared = _FIXED.unpack_from(data, 0)
    if magic != MAGIC:
        raise _malformed(
            "not an nbcompile frozen model (bad magic bytes)",
            "expected a file written by nbcompile.frozen",
        )
    if version > FORMAT_VERSION or version < MIN_FORMAT_VERSION:
        newer = version > FORMAT_VERSION
        raise FreezeError(
            f"format_version {version} is not readable by this nbcompile "
            f"(reads {MIN_FORMAT_VERSION}..{FORMAT_VERSION})",
            code="NBC502",
            hint="upgrade nbcompile" if newer else "re-freeze the model with this nbcompile",
        )
    table_end = HEADER_SIZE - 32
    if hashlib.sha256(data[:table_end]).digest() != data[table_end:HEADER_SIZE]:
        raise FreezeError("header digest mismatch: the header was modified", code="NBC501")
    if count != len(SECTION_KINDS):
        raise _malformed(f"section count is {count}, expected {len(SECTION_KINDS)}")
    if declared != size:
        what = "is truncated" if declared > size else "has trailing bytes"
        raise _malformed(f"file is {size} bytes but its header says {declared}: the file {what}")
    table: dict[str, tuple[memoryview, bytes]] = {}
    expected = HEADER_SIZE
    mem = memoryview(data)
    for i, kind in enumerate(SECTION_KINDS):
        got, flags, offset, length, digest = _ENTRY.unpack_from(data, _FIXED.size + i * _ENTRY.size)
        name = SECTION_NAMES[kind]
        if got != kind:
            raise _malformed(f"section {i} is {got!r}, expected {kind!r} ({name})")
        if flags != 0:
            raise _malformed(f"section {name}: unknown flags {flags:#x}")
        if offset != expected:
            raise _malformed(f"section {name} starts at {offset}, expected {expected} (no holes)")
        if length > size - offset:
            raise _malformed(f"section {name} ({length} bytes at {offset}) runs past end of file")
        table[name] = (mem[offset : offset + length], digest)
        expected = offset + length
    if expected != size:
        raise _malformed(f"{size - expected} bytes after the last section (trailing garbage)")
    for name, (view, digest) in table.items():
        if hashlib.sha256(view).digest() != digest:
            raise FreezeError(
                f"section {name}: SHA-256 mismatch (the file was modified or corrupted)",
                code="NBC501",
            )
    views = {name: view for name, (view, _) in table.items()}
    if len(views["manifest"]) > MAX_MANIFEST_BYTES:
        raise _malformed(f"manifest is {len(views['manifest'])} bytes, above the limit")
    return Sections(version, views["manifest"], views["weights"], views["program"], size)
