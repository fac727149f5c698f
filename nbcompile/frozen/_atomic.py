"""Atomic writes of `.nbc` files, and clean-up after a freeze that was killed.

A file is streamed to a hidden temp file ``.NAME.PID.RANDOM.tmp`` in the target folder,
fsync'ed and moved over the target with ``os.replace``: readers see the old file or the new
one, never a partial one. A freeze killed with SIGKILL cannot remove its temp file; the next
freeze to the same path removes it (its PID no longer runs).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from nbcompile.errors import FreezeError
from nbcompile.frozen._format import FORMAT_VERSION, HEADER_SIZE, header, pad_manifest


def _cannot_write(target: Path, err: OSError) -> FreezeError:
    why = {
        errno.ENOSPC: "the disk is full",
        errno.EFBIG: "the file would exceed the file-size limit",
        errno.EDQUOT: "the disk quota is exceeded",
        errno.EISDIR: "it is a directory",
        errno.ENOENT: f"the folder {str(target.parent)!r} does not exist",
        errno.EACCES: "permission denied",
        errno.EROFS: "the file system is read-only",
    }.get(err.errno or 0, err.strerror or str(err) or type(err).__name__)
    return FreezeError(
        f"cannot write {str(target)!r}: {why}",
        code="NBC506",
        hint="an existing file at that path was left untouched",
    )


def check_target(path: str | os.PathLike[str]) -> Path:
    """Refuse (NBC506) a target that cannot be written before any work is done."""
    target = Path(path)
    if target.is_dir():
        raise _cannot_write(target, IsADirectoryError(errno.EISDIR, "is a directory"))
    if not target.parent.is_dir():
        raise _cannot_write(target, FileNotFoundError(errno.ENOENT, "no such folder"))
    return target


_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.[^.]+\.tmp$")
_OLD_TEMP_SECONDS = 3600


def remove_stale_temps(target: Path) -> list[Path]:
    """Remove temp files that an interrupted (killed) freeze to ``target`` left behind.

    A temp file is ``.NAME.PID.RANDOM.tmp``: it is stale when no process PID runs any more
    (a live PID, even reused, keeps it: a concurrent freeze is never disturbed). Temp files
    of the older ``.NAME.RANDOM.tmp`` form are removed after an hour.
    """
    removed = []
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return removed
    for entry in entries:
        if not (entry.name.startswith(f".{target.name}.") and entry.name.endswith(".tmp")):
            continue
        match = _TEMP.match(entry.name)
        if match and match["name"] == target.name:
            stale = not _alive(int(match["pid"]))
        else:
            try:
                stale = time.time() - entry.stat(follow_symlinks=False).st_mtime > _OLD_TEMP_SECONDS
            except OSError:
                continue
        if stale and entry.is_file(follow_symlinks=False):
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # exists (another user's) or cannot tell: keep the file
    return True


def write_atomic(
    path: str | os.PathLike[str],
    manifest: bytes,
    weight_chunks: Callable[[], Iterable[bytes | memoryview]],
    program: bytes,
) -> int:
    """Stream a container to a temp file in the target folder, then ``os.replace`` it.

    ``weight_chunks`` is called once and yields the weight section piece by piece, so a large
    model is never held twice in memory. On any failure the temp file is removed and an
    existing file at ``path`` is left untouched; an OSError (full disk, file-size limit,
    missing folder, directory in the way) becomes FreezeError NBC506 naming the path. Temp
    files of earlier freezes to ``path`` that were killed are removed first. Returns the size.
    """
    target = check_target(path)
    manifest = pad_manifest(manifest)
    remove_stale_temps(target)
    try:
        fd, tmp = tempfile.mkstemp(
            prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp", dir=target.parent
        )
    except OSError as err:
        raise _cannot_write(target, err) from err
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
            out.write(header(FORMAT_VERSION, offset, entries))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(err, OSError):
            raise _cannot_write(target, err) from err
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
