"""Programs this machine has already checked, so a file is not probed again on every load.

Probing a program in a forked child and checking its custom calls against JAX's lowering
costs tens of milliseconds, most of a small model's load. Once a program has passed every
program check (or ``freeze`` has written it, after running the same checks), its probe result
is recorded under the SHA-256 of the program bytes, in a folder named after everything the
checks depend on (nbcompile, jax and jaxlib versions, ``RULES``, the limits). A later load of
the same program bytes reuses the record and skips the child and the custom-call lowering;
the manifest is still checked against the record as against a fresh probe.

A record says who checked the program: ``freeze`` on this machine (``written_here``: JAX's own
export of the user's code produced it) or a load's probe (a program from elsewhere). A
program from elsewhere is also lowered and shape-refined in a forked child before its first
call at each input shape (``_model``); each input shape that got through is recorded beside
the program's record (``recall_shapes`` / ``remember_shapes``), so a later process does not
fork for it again.

Folder: ``$NBCOMPILE_CHECKED_DIR``, else ``$XDG_CACHE_HOME/nbcompile/checked`` (``~/.cache``);
``NBCOMPILE_CHECKED_DIR=off`` turns the record off. Whoever can write that folder can make a
program skip the probe, which is no more than what they could do to the user's files anyway.
A folder that cannot be written is silently not used (the records only save time).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

#: bump when a program check changes, so older records are not reused
RULES = 2


def _folder() -> Path | None:
    configured = os.environ.get("NBCOMPILE_CHECKED_DIR")
    if configured == "off":
        return None
    if configured:
        base = Path(configured)
    else:
        base = (
            Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
            / "nbcompile"
            / "checked"
        )
    return base / _scope()


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


def _scope() -> str:
    from nbcompile.frozen import _program

    parts = (
        *_versions(),
        RULES,
        _program.MAX_OPS,
        _program.MAX_CHAIN,
        _program.MAX_NESTING,
    )
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def recall(program_sha256: bytes) -> dict[str, Any] | None:
    """The recorded probe result of a program checked before, or None."""
    folder = _folder()
    if folder is None or len(program_sha256) != 32:
        return None
    try:
        record = json.loads((folder / f"{program_sha256.hex()}.json").read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and "ops" in record else None


def remember(program_sha256: bytes, result: dict[str, Any], *, written_here: bool = False) -> None:
    """Record that a program passed every program check (best effort).

    ``written_here``: ``freeze`` wrote it on this machine (not a program from elsewhere).
    """
    if len(program_sha256) != 32:
        return
    # a probe's answer comes from a child that read untrusted bytes: never let it say "trusted"
    record = {key: value for key, value in result.items() if key != "written_here"}
    if written_here:
        record["written_here"] = True
    _write(f"{program_sha256.hex()}.json", json.dumps(record))


def _shape_name(program_sha256: bytes, shapes: Any) -> str:
    key = hashlib.sha256(json.dumps(shapes, sort_keys=True).encode()).hexdigest()[:32]
    return f"{program_sha256.hex()}.{key}.shapes"


def recall_shapes(program_sha256: bytes, shapes: Any) -> bool:
    """Whether a program from elsewhere got through lowering and refinement at ``shapes``."""
    folder = _folder()
    if folder is None or len(program_sha256) != 32:
        return False
    return (folder / _shape_name(program_sha256, shapes)).is_file()


def remember_shapes(program_sha256: bytes, shapes: Any) -> None:
    """Record that the program got through lowering and refinement at ``shapes`` (JSON-able)."""
    if len(program_sha256) == 32:
        _write(_shape_name(program_sha256, shapes), json.dumps(shapes))


def _write(name: str, text: str) -> None:
    folder = _folder()
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(tmp, folder / name)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
