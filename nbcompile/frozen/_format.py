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

import hashlib
import os
import stat
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nbcompile.errors import FreezeError

# Format version history (bump on any change a version-1 reader would misread):
#   Version 1, 2026-11-30: first version. Header 224 bytes, sections MANI/WGHT/PROG,
#     manifest schema 1 (docs/format.md), weights in safetensors layout, program =
#     jax.export serialization (flatbuffer) of a function of flat array arguments.
#   Version 1, 2026-11-30 (addition, version unchanged): input/output signature shapes may
#     hold the string "b", a symbolic batch dimension (leading dimension of inputs; anywhere in
#     outputs; never in weights). Files without it are read as before; readers of version 1
#     from this date accept both.
#   Version 1, 2026-12-02 (addition, version unchanged): weight and input array specs may carry
#     "prng_impl" (a typed PRNG key stored as its uint32 key data; the implementation from a
#     closed list, rebuilt with jax.random.wrap_key_data). Files without it are read as before;
#     readers before this date refuse files with it (NBC500 naming the field).
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
    #: the program section's SHA-256 (checked against its bytes)
    program_sha256: bytes = b""
    #: raises NBC501 unless the weight section's digest matched (waits for a deferred check)
    weights_checked: Callable[[], None] = lambda: None


def header(version: int, file_size: int, entries: list[tuple[bytes, int, int, bytes]]) -> bytes:
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
    return header(format_version, offset, entries) + manifest + weights + program


def unpack_unchecked(data: bytes) -> tuple[bytes, bytes, bytes]:
    """Split a well-formed container into (manifest, weights, program) without digest checks."""
    entries = [_ENTRY.unpack_from(data, _FIXED.size + i * _ENTRY.size) for i in range(3)]
    return tuple(bytes(data[off : off + length]) for _, _, off, length, _ in entries)  # type: ignore[return-value]


def _unreadable(path: str | os.PathLike[str], why: str) -> FreezeError:
    return FreezeError(
        f"cannot open {os.fspath(path)!r}: {why}",
        code="NBC509",
        hint="give the path of a regular .nbc file",
    )


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a named pipe (FIFO)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def read_file(path: str | os.PathLike[str], max_bytes: int | None = None) -> memoryview:
    """Read a container file, checking what it is before reading any byte of it.

    Order: ``stat`` (a regular file, not a directory, pipe or device: NBC509), its size
    against the format's bounds (NBC500) and twice its size against ``max_bytes`` (reading it
    and placing its weights on a device can hold both copies at once: NBC508); then open it
    without blocking, check the 224-byte header and section table (a file of the wrong kind is
    refused after reading 224 bytes), and only then read the rest.
    """
    try:
        info = os.stat(path)
    except OSError as err:
        raise _unreadable(path, err.strerror or type(err).__name__) from None
    if not stat.S_ISREG(info.st_mode):
        raise _unreadable(path, f"it is {_kind(info.st_mode)}")
    _check_size(info.st_size, max_bytes)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    flags |= getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        raise _unreadable(path, err.strerror or type(err).__name__) from None
    try:
        opened = os.fstat(fd)  # what was opened (the path may have changed since the stat)
        if not stat.S_ISREG(opened.st_mode):
            raise _unreadable(path, f"it is {_kind(opened.st_mode)}")
        size = opened.st_size
        _check_size(size, max_bytes)
        with open(fd, "rb", buffering=0, closefd=False) as f:
            head = _read_exactly(f, HEADER_SIZE)
            check_header(head, size)
            # Only now (the header says this is an .nbc file of this size) read it whole, into
            # a buffer that starts on a 64-byte boundary (the weight section is 64-aligned in
            # the file, so its tensors are too: the CPU backend then uses them without a copy)
            # and is not zero-filled first; the header is checked again with the sections.
            f.seek(0)
            data = _aligned(size)
            if _read_into(f, data) != size or f.read(1):
                raise _malformed("the file changed size while being read")
    except OSError as err:
        raise _unreadable(path, err.strerror or type(err).__name__) from None
    finally:
        os.close(fd)
    return data


def _check_size(size: int, max_bytes: int | None) -> None:
    if size < HEADER_SIZE:
        raise _malformed(
            f"file is {size} bytes, smaller than the {HEADER_SIZE}-byte .nbc header",
            "the file is empty or truncated; freeze the model again",
        )
    if size > MAX_FILE_BYTES:
        raise _malformed(f"file is {size} bytes, above the {MAX_FILE_BYTES}-byte limit")
    if max_bytes is not None and 2 * size > max_bytes:
        raise FreezeError(
            f"file is {size} bytes; reading it and placing its weights needs up to twice that, "
            f"above the memory budget of {max_bytes} bytes",
            code="NBC508",
            hint="pass load(path, max_bytes=...) with a larger budget if the machine has room",
        )


def _read_exactly(f: Any, n: int) -> bytes:
    """``n`` bytes from ``f`` (a regular file never returns short reads before its end)."""
    data = bytearray(n)
    if _read_into(f, memoryview(data)) != n:
        raise _malformed("the file changed size while being read")
    return bytes(data)


def _read_into(f: Any, view: memoryview) -> int:
    done = 0
    while done < len(view):
        got = f.readinto(view[done:])
        if not got:
            break
        done += got
    return done


def _aligned(size: int) -> memoryview:
    """A writable, uninitialised buffer of ``size`` bytes starting on a 64-byte boundary."""
    import numpy as np

    raw = np.empty(size + WEIGHTS_ALIGN, np.uint8)
    start = -raw.ctypes.data % WEIGHTS_ALIGN
    return memoryview(raw[start : start + size])


def check_header(head: bytes, size: int) -> tuple[int, list[tuple[str, int, int, bytes]]]:
    """Check magic, version, header digest and section table of a file of ``size`` bytes.

    Returns the format version and (name, offset, length, sha256) per section. Reads only
    ``head`` (the first ``HEADER_SIZE`` bytes), so a file of the wrong kind is refused before
    the rest of it is read.
    """
    if size < HEADER_SIZE or len(head) < HEADER_SIZE:
        raise _malformed(f"file is {size} bytes, smaller than the {HEADER_SIZE}-byte .nbc header")
    magic, version, count, declared = _FIXED.unpack_from(head, 0)
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
    if hashlib.sha256(head[:table_end]).digest() != head[table_end:HEADER_SIZE]:
        raise FreezeError("header digest mismatch: the header was modified", code="NBC501")
    if count != len(SECTION_KINDS):
        raise _malformed(f"section count is {count}, expected {len(SECTION_KINDS)}")
    if declared != size:
        what = "is truncated" if declared > size else "has trailing bytes"
        raise _malformed(f"file is {size} bytes but its header says {declared}: the file {what}")
    table = []
    expected = HEADER_SIZE
    for i, kind in enumerate(SECTION_KINDS):
        got, flags, offset, length, digest = _ENTRY.unpack_from(head, _FIXED.size + i * _ENTRY.size)
        name = SECTION_NAMES[kind]
        if got != kind:
            raise _malformed(f"section {i} is {got!r}, expected {kind!r} ({name})")
        if flags != 0:
            raise _malformed(f"section {name}: unknown flags {flags:#x}")
        if offset != expected:
            raise _malformed(f"section {name} starts at {offset}, expected {expected} (no holes)")
        if length > size - offset:
            raise _malformed(f"section {name} ({length} bytes at {offset}) runs past end of file")
        table.append((name, offset, length, digest))
        expected = offset + length
    if expected != size:
        raise _malformed(f"{size - expected} bytes after the last section (trailing garbage)")
    if table[0][2] > MAX_MANIFEST_BYTES:
        raise _malformed(f"manifest is {table[0][2]} bytes, above the limit")
    return version, table


#: weight sections at least this large are hashed in a thread while loading goes on
DEFER_DIGEST_BYTES = 4 << 20


def _mismatch(name: str) -> FreezeError:
    return FreezeError(
        f"section {name}: SHA-256 mismatch (the file was modified or corrupted)", code="NBC501"
    )


def check_sections(
    data: bytes | bytearray | memoryview, *, defer_weights: bool = False
) -> Sections:
    """Check header, table and section digests of a whole file; return the sections.

    With ``defer_weights`` a large weight section is hashed in a background thread (hashlib
    releases the GIL) while the caller checks the program and places the weights; the caller
    must call ``weights_checked()`` before handing anything out.
    """
    size = len(data)
    version, table = check_header(bytes(data[:HEADER_SIZE]), size)
    mem = memoryview(data)
    views, digests = {}, {}
    deferred: Callable[[], None] = lambda: None  # noqa: E731
    for name, offset, length, digest in table:
        view = mem[offset : offset + length]
        views[name], digests[name] = view, digest
        if name == "weights" and defer_weights and length >= DEFER_DIGEST_BYTES:
            deferred = _digest_in_thread(view, digest, name)
        elif hashlib.sha256(view).digest() != digest:
            raise _mismatch(name)
    return Sections(
        version,
        views["manifest"],
        views["weights"],
        views["program"],
        size,
        digests["program"],
        deferred,
    )


def _digest_in_thread(view: memoryview, digest: bytes, name: str) -> Callable[[], None]:
    result: list[bool] = []
    worker = threading.Thread(
        target=lambda: result.append(hashlib.sha256(view).digest() == digest), daemon=True
    )
    worker.start()

    def wait() -> None:
        worker.join()
        if result != [True]:
            raise _mismatch(name)

    return wait
