"""Atomic writes of `.nbc` files (and the CLI's outputs), and clean-up after a killed write.

A file is streamed to a hidden temp file ``.NAME.w-RANDOM.tmp`` in the target folder (created
by ``mkstemp``: exclusively, so a link planted at that name is never followed), fsync'ed and
moved over the target with ``os.replace``: readers see the old file or the new one, never a
partial one. The writer holds an exclusive ``flock`` on its temp file from before its first
byte until the rename. A write killed with SIGKILL cannot remove its temp file; the next write
to the same path removes it: a temp file is stale when its lock can be taken (the kernel drops
a dead process's locks, in any PID namespace). A writer that finds its new temp file removed
in the instant before it locked it (link count 0) starts another. Temp files of other forms
are removed after an hour. A target that exists and is
not a regular file (device, pipe, socket) is refused (NBC509) before anything is written.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import stat
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, TypeVar

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: stale temp files go after an hour
    fcntl = None  # type: ignore[assignment]

from nbcompile.errors import FreezeError
from nbcompile.frozen._format import FORMAT_VERSION, HEADER_SIZE, header, pad_manifest

T = TypeVar("T")

#: seconds after which a temp file that is not of the locked form is removed
_OLD_TEMP_SECONDS = 3600
_LOCKED_TEMP = re.compile(r"^\.(?P<name>.+)\.w-[^.]+\.tmp$")


def _cannot_write(target: Path, err: OSError, code: str = "NBC506") -> FreezeError:
    missing = (
        f"the folder {str(target.parent)!r} does not exist"
        if not target.parent.is_dir()
        else "its temporary file was removed while it was written (by another process)"
    )
    why = {
        errno.ENOSPC: "the disk is full",
        errno.EFBIG: "the file would exceed the file-size limit",
        errno.EDQUOT: "the disk quota is exceeded",
        errno.EISDIR: "it is a directory",
        errno.ENOENT: missing,
        errno.EACCES: "permission denied",
        errno.EROFS: "the file system is read-only",
    }.get(err.errno or 0, err.strerror or str(err) or type(err).__name__)
    return FreezeError(
        f"cannot write {str(target)!r}: {why}",
        code=code,
        hint="an existing file at that path was left untouched",
    )


def check_target(path: str | os.PathLike[str], code: str = "NBC506") -> Path:
    """Refuse a target that cannot be written before any work is done: a directory or a
    missing folder (``code``), or an existing non-regular file (a device, pipe or socket, also
    through a link, would be replaced by a regular file: NBC509 for a freeze, else ``code``)."""
    target = Path(path)
    if target.is_dir():
        raise _cannot_write(target, IsADirectoryError(errno.EISDIR, "is a directory"), code)
    if not target.parent.is_dir():
        raise _cannot_write(target, FileNotFoundError(errno.ENOENT, "no such folder"), code)
    try:
        mode = os.stat(target).st_mode
    except OSError:
        return target  # nothing there (or a dangling link): a new file
    if not stat.S_ISREG(mode):
        raise FreezeError(
            f"cannot write {str(target)!r}: it exists and is not a regular file "
            "(a device, pipe or socket)",
            code="NBC509" if code == "NBC506" else code,
            hint="write to a regular file path; nothing was written",
        )
    return target


def _lock(fd: int, *, wait: bool) -> bool:
    """Take the exclusive ``flock`` on ``fd``; False when another process holds it."""
    if fcntl is None:
        return not wait
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except OSError as err:
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        if wait:
            return False  # no locks on this file system: the hour rule applies
        raise
    return True


def _remove_if_dead(path: str) -> bool:
    """Remove the locked-form temp file ``path`` when no live writer holds it."""
    flags = os.O_RDWR | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or not _lock(fd, wait=False):
            return False
        now = os.lstat(path)
        if (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino):
            return False
        os.unlink(path)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def remove_stale_temps(target: Path) -> list[Path]:
    """Remove temp files that an interrupted (killed) write to ``target`` left behind.

    A ``.NAME.w-RANDOM.tmp`` file is stale when its writer's lock is gone (the writer died);
    a live writer, in this or any other PID namespace, keeps it. Temp
    files of any other ``.NAME.*.tmp`` form (older versions) are removed after an hour.
    """
    removed = []
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return removed
    for entry in entries:
        if not (entry.name.startswith(f".{target.name}.") and entry.name.endswith(".tmp")):
            continue
        with contextlib.suppress(OSError):
            if not entry.is_file(follow_symlinks=False):
                continue
            match = _LOCKED_TEMP.match(entry.name)
            if match and match["name"] == target.name and fcntl is not None:
                if _remove_if_dead(entry.path):
                    removed.append(Path(entry.path))
            elif time.time() - entry.stat(follow_symlinks=False).st_mtime > _OLD_TEMP_SECONDS:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
    return removed


def _locked_temp(target: Path) -> tuple[int, str]:
    """A new temp file for ``target``, created exclusively and locked by this process."""
    for _ in range(16):
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.w-", suffix=".tmp", dir=target.parent)
        _lock(fd, wait=True)
        if os.fstat(fd).st_nlink:  # not removed by a cleaner before the lock was ours
            return fd, tmp
        os.close(fd)
    raise OSError(errno.EAGAIN, "temporary files are removed as soon as they are created")


def replace_with(
    path: str | os.PathLike[str], fill: Callable[[IO[bytes]], T], *, code: str = "NBC506"
) -> T:
    """Write a file through ``fill(out)`` on a locked temp file in the target folder, fsync
    it and ``os.replace`` the target; returns what ``fill`` returns.

    On any failure the temp file (this writer's own, and only it) is removed and an existing
    file at ``path`` is left untouched; an OSError becomes FreezeError ``code`` naming the
    path. Stale temp files of earlier writes to ``path`` that were killed are removed first.
    """
    target = check_target(path, code)
    remove_stale_temps(target)
    try:
        fd, tmp = _locked_temp(target)
    except OSError as err:
        raise _cannot_write(target, err, code) from err
    try:
        os.fchmod(fd, _file_mode(target))
        with os.fdopen(fd, "wb") as out:
            result = fill(out)
            out.flush()
            os.fsync(out.fileno())
            os.replace(tmp, target)  # still locked: no cleaner can take it before this
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(err, OSError):
            raise _cannot_write(target, err, code) from err
        raise
    return result


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
    manifest = pad_manifest(manifest)

    def fill(out: IO[bytes]) -> int:
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
        return offset

    return replace_with(path, fill)


def _file_mode(target: Path) -> int:
    """Keep an existing file's permissions; new files get 0o666 minus the umask (not 0o600)."""
    try:
        return target.stat().st_mode & 0o777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
