"""Programs this user has already checked, so a file is not probed again on every load.

Probing a program in a forked child costs tens of milliseconds, most of a small model's load.
Once a program has passed every program check (or ``freeze`` has written it, after running the
same checks), its probe result is recorded under the SHA-256 of the program bytes, in a folder
named after everything the checks depend on (nbcompile, jax and jaxlib versions, ``RULES``,
the limits, the checking code itself). A later load of the same program bytes reuses the
recorded probe result instead of forking; every check on that result still runs (the program
facts, the custom calls against JAX's lowering, the manifest's claims). A program from
elsewhere is also lowered and shape-refined in a forked child before its first call at each
input shape (``_model``); each input shape that got through is recorded too
(``recall_shapes`` / ``remember_shapes``), so a later process does not fork for it again.

A record is input like any file, and it can only ever save a child, never change an answer:

- Folder: ``$NBCOMPILE_CHECKED_DIR``, else ``$XDG_CACHE_HOME/nbcompile/checked`` (absolute
  values only), else ``~/.cache/nbcompile/checked``, and only if it is a folder only this user
  can write (``nbcompile._dirs``); ``NBCOMPILE_CHECKED_DIR=off`` turns the record off.
- Each record names the program's SHA-256, the folder's scope, its kind and the writer's user
  id, and carries an HMAC-SHA256 of all of it under a random per-user key kept beside the
  records (``key``, mode 0600): a record copied from another machine, user or archive, or written by
  anything but nbcompile, does not verify and is ignored.
- It is read as untrusted input: opened without following links or blocking, a regular file
  of this user of at most ``MAX_RECORD_BYTES``, JSON of a fixed schema. Anything else is
  ignored (the checks run) and the record is written again.
- ``written_here`` (this program came from the user's own ``freeze``, so its first calls need
  no child) is never read from a record: it holds only in the process whose ``freeze`` wrote
  the program, for the record folder it wrote to.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import json
import os
import secrets
import stat
import tempfile
from pathlib import Path
from typing import Any

from nbcompile import _dirs

#: bump when a program check changes, so older records are not reused
RULES = 3
#: the largest record read (a probe result lists at most 64 custom-call signatures)
MAX_RECORD_BYTES = 4 * 1024 * 1024
_KEY_BYTES = 32
_FORMAT = "nbcompile-checked-program"
_WHAT = "checked-programs record"
#: (record folder, program SHA-256) of programs this process's ``freeze`` wrote
_FROZEN_HERE: set[tuple[str, bytes]] = set()
#: per-user keys already read, by record folder
_KEYS: dict[str, bytes] = {}


def _base() -> Path | None:
    configured = os.environ.get("NBCOMPILE_CHECKED_DIR")
    if configured == "off":
        return None
    return _dirs.configured("NBCOMPILE_CHECKED_DIR", "nbcompile", "checked")


def _folder() -> Path | None:
    base = _dirs.private_folder(_base(), _WHAT)
    return None if base is None else _dirs.private_folder(base / _scope(), _WHAT)


@functools.cache
def _versions() -> tuple[str, str, str]:
    """nbcompile, jax and jaxlib versions (reading the installed metadata costs ~0.5 ms)."""
    from importlib import metadata

    import jax
    import jaxlib

    try:
        own = metadata.version("nbcompile")
    except metadata.PackageNotFoundError:
        own = "unknown"
    return own, jax.__version__, jaxlib.__version__


@functools.cache
def _code_digest() -> str:
    """SHA-256 of the modules whose checks a record stands for (any edit retires records)."""
    from nbcompile.frozen import _customcalls, _program

    digest = hashlib.sha256()
    for module in (_program, _customcalls):
        with contextlib.suppress(OSError, TypeError):
            digest.update(Path(module.__file__ or "").read_bytes())
    return digest.hexdigest()


def _scope() -> str:
    from nbcompile.frozen import _program

    parts = (
        *_versions(),
        RULES,
        _code_digest(),
        _program.MAX_OPS,
        _program.MAX_CHAIN,
        _program.MAX_NESTING,
    )
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def _uid() -> int:
    return os.getuid() if hasattr(os, "getuid") else -1


# ---------------------------------------------------------------- reading untrusted files
def _read_small(path: Path, limit: int, *, private: bool = False) -> bytes | None:
    """The bytes of ``path`` if it is a regular file of this user of at most ``limit`` bytes
    (``private``: readable by nobody else either); never follows a link or blocks."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    flags |= getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if (
            not stat.S_ISREG(info.st_mode)
            or info.st_size > limit
            or (hasattr(os, "getuid") and info.st_uid != os.getuid())
            or (private and hasattr(os, "getuid") and info.st_mode & 0o077)
        ):
            return None
        data = os.read(fd, limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= limit else None


def _key(folder: Path) -> bytes | None:
    """This user's record key in ``folder`` (made on first use; a damaged one is replaced)."""
    cached = _KEYS.get(os.fspath(folder))
    if cached is not None:
        return cached
    path = folder / "key"
    key = _read_small(path, _KEY_BYTES, private=True)
    if key is None or len(key) != _KEY_BYTES:
        fresh = secrets.token_bytes(_KEY_BYTES)
        try:
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".key-")  # mode 0600
        except OSError:
            return None
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(fresh)
            if key is None and not os.path.lexists(path):
                os.link(tmp, path)  # fails if another process made one meanwhile: use it
            else:
                os.replace(tmp, path)  # damaged (wrong size, mode, kind): replaced
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        key = _read_small(path, _KEY_BYTES, private=True)
        if key is None or len(key) != _KEY_BYTES:
            return None
    _KEYS[os.fspath(folder)] = key
    return key


def _mac(key: bytes, envelope: dict[str, Any]) -> str:
    text = json.dumps(envelope, sort_keys=True, separators=(",", ":"))
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def _open_record(folder: Path | None, name: str, kind: str, program_sha256: bytes) -> Any:
    """The body of record ``name`` in ``folder`` if it is genuine: this user's key, this
    program, this scope and kind; None for anything else (missing, damaged, forged, foreign)."""
    if folder is None or len(program_sha256) != 32:
        return None
    key = _key(folder)
    data = _read_small(folder / name, MAX_RECORD_BYTES)
    if key is None or data is None:
        return None
    try:
        record = json.loads(data)
    except (ValueError, RecursionError):  # not UTF-8 / not JSON / nested past the C stack
        return None
    if not isinstance(record, dict) or set(record) != {
        "format",
        "kind",
        "program_sha256",
        "scope",
        "uid",
        "body",
        "mac",
    }:
        return None
    mac = record.pop("mac")
    try:
        want = _mac(key, record)
    except (ValueError, RecursionError):  # a body nested deep enough to read but not write
        return None
    if not isinstance(mac, str) or not mac.isascii() or not hmac.compare_digest(mac, want):
        return None  # (compare_digest refuses non-ASCII strings)
    if (
        record["format"] != _FORMAT
        or record["kind"] != kind
        or record["program_sha256"] != program_sha256.hex()
        or record["scope"] != folder.name
        or record["uid"] != _uid()
    ):
        return None
    return record["body"]


def _save(name: str, kind: str, program_sha256: bytes, body: Any) -> Path | None:
    """Write a record (best effort); the folder it went to, or None."""
    folder = _folder()
    if folder is None or len(program_sha256) != 32:
        return None
    key = _key(folder)
    if key is None:
        return None
    record = {
        "format": _FORMAT,
        "kind": kind,
        "program_sha256": program_sha256.hex(),
        "scope": folder.name,
        "uid": _uid(),
        "body": body,
    }
    record["mac"] = _mac(key, record)
    text = json.dumps(record)
    if len(text.encode()) > MAX_RECORD_BYTES:
        return None
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    except OSError:
        return None
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(tmp, folder / name)  # replaces a damaged record (not a folder in its place)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return None
    return folder


# ---------------------------------------------------------------- the probe result's schema
def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _string_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _call(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("target"), str)
        and _strings(value.get("operands"))
        and _strings(value.get("results"))
        and _string_map(value.get("attributes"))
    )


def _probe_result(body: Any) -> bool:
    """Whether ``body`` has the schema of a probe result that passed (what the checks read)."""
    return (
        isinstance(body, dict)
        and "refuse" not in body
        and "error" not in body
        and _strings(body.get("platforms"))
        and _count(body.get("nr_devices"))
        and _string_map(body.get("module_attributes"))
        and all(_count(body.get(k)) for k in ("ops", "chain", "nesting"))
        and isinstance(body.get("custom_calls"), list)
        and all(_call(c) for c in body["custom_calls"])
    )


# ---------------------------------------------------------------- the API
def recall(program_sha256: bytes) -> dict[str, Any] | None:
    """The recorded probe result of a program this user checked before, or None.

    Its ``written_here`` is True only if this process's ``freeze`` wrote the program (to the
    record folder in use now).
    """
    folder = _folder()
    body = _open_record(folder, f"{program_sha256.hex()}.json", "program", program_sha256)
    if not _probe_result(body):
        return None
    body["written_here"] = (os.fspath(folder), program_sha256) in _FROZEN_HERE
    return body


def remember(program_sha256: bytes, result: dict[str, Any], *, written_here: bool = False) -> None:
    """Record that a program passed every program check (best effort).

    ``written_here``: this process's ``freeze`` wrote it (held in this process only).
    """
    body = {key: value for key, value in result.items() if key != "written_here"}
    if not _probe_result(body):
        return
    folder = _save(f"{program_sha256.hex()}.json", "program", program_sha256, body)
    if written_here and folder is not None:
        _FROZEN_HERE.add((os.fspath(folder), program_sha256))


def _shape_name(program_sha256: bytes, shapes: Any) -> str:
    key = hashlib.sha256(json.dumps(shapes, sort_keys=True).encode()).hexdigest()[:32]
    return f"{program_sha256.hex()}.{key}.shapes"


def recall_shapes(program_sha256: bytes, shapes: Any) -> bool:
    """Whether a program from elsewhere got through lowering and refinement at ``shapes``."""
    canonical = json.loads(json.dumps(shapes))
    name = _shape_name(program_sha256, shapes)
    body = _open_record(_folder(), name, "shapes", program_sha256)
    return body is not None and body == canonical


def remember_shapes(program_sha256: bytes, shapes: Any) -> None:
    """Record that the program got through lowering and refinement at ``shapes`` (JSON-able)."""
    _save(_shape_name(program_sha256, shapes), "shapes", program_sha256, shapes)
