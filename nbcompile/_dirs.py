"""Cache folders only this user can write: where nbcompile keeps what it reads back later.

What nbcompile reads back from a cache folder skips work: JAX's persistent cache holds native
code, the checked-programs record lets a file skip its probe, the CPU peaks feed the roofline.
So a folder is used only if nobody else can put files in it:

- the path is absolute: ``$XDG_CACHE_HOME`` is used only when it is an absolute path (the XDG
  spec says to ignore relative and empty values), else ``~/.cache``; an ``NBCOMPILE_*``
  override that is not absolute is not used at all (a relative one would name a folder in
  whatever the current folder is, e.g. one unpacked from a download);
- missing folders are created with mode 0700;
- the folder itself is not a symlink, is owned by this user and is not writable by group or
  others, and every folder above it (symlinks resolved) is owned by this user or root and is
  not writable by others, unless it is sticky (like ``/tmp``). Group-writable is fine where the
  group is the user's private group (named like the user, no other members: umask 002
  systems).

Anything else is refused: the caller works without the cache, and one line on stderr says so
(once per folder and process). On systems without POSIX user ids (Windows) only the first two
rules apply.
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
import sys
from pathlib import Path

_NOTED: set[str] = set()


def note(message: str) -> None:
    """One line on stderr, once per process."""
    if message not in _NOTED:
        _NOTED.add(message)
        print(f"nbcompile: {message}", file=sys.stderr)


def cache_home() -> Path | None:
    """``$XDG_CACHE_HOME`` if it is absolute, else ``~/.cache`` (None if no home is known)."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if xdg and os.path.isabs(xdg):
        return Path(xdg)
    try:
        home = Path.home()
    except (RuntimeError, KeyError, OSError):
        return None
    return home / ".cache" if home.is_absolute() else None


def configured(variable: str, *default: str) -> Path | None:
    """``$variable`` if set (None, with a note, if it is not absolute), else the user cache
    folder joined with ``default``."""
    value = os.environ.get(variable, "")
    if value:
        if os.path.isabs(value):
            return Path(value)
        note(f"${variable}={value!r} is not an absolute path: not used (no cache)")
        return None
    home = cache_home()
    return home.joinpath(*default) if home is not None else None


def _uid() -> int | None:
    return os.getuid() if hasattr(os, "getuid") else None


def _unsafe(path: str, uid: int | None, *, leaf: bool) -> str | None:
    """Why ``path`` (an existing folder) could be written by someone else, or None."""
    try:
        info = os.lstat(path)
    except OSError as err:
        return f"cannot be read ({err.strerror})"
    if stat.S_ISLNK(info.st_mode):
        return "is a symlink"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a folder"
    if uid is None:
        return None
    writable = info.st_mode & stat.S_IWOTH or (
        info.st_mode & stat.S_IWGRP and not _own_group(info.st_gid, uid)
    )
    if leaf:
        if info.st_uid != uid:
            return f"is owned by user id {info.st_uid}, not you"
        return "can be written by other users" if writable else None
    if info.st_uid not in (uid, 0):
        return f"is inside {path}, owned by user id {info.st_uid}"
    if writable and not info.st_mode & stat.S_ISVTX:
        return f"is inside {path}, which other users can write"
    return None


@functools.cache
def _own_group(gid: int, uid: int) -> bool:
    """Whether group ``gid`` is this user's private group (named like the user, no other
    member, no other user's primary group; never root's): systems with user private groups
    make folders group-writable (umask 002)."""
    try:
        import grp
        import pwd

        user = pwd.getpwuid(uid)
        group = grp.getgrgid(gid)
        others = any(u.pw_gid == gid and u.pw_uid != uid for u in pwd.getpwall())
    except (ImportError, KeyError, OSError):
        return False
    return (
        gid != 0
        and gid == user.pw_gid
        and group.gr_name == user.pw_name
        and set(group.gr_mem) <= {user.pw_name}
        and not others
    )


def _above_unsafe(path: Path, uid: int | None) -> str | None:
    """Why a folder above ``path`` that exists (symlinks resolved) is unsafe, or None."""
    existing = path.parent
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    real = Path(os.path.realpath(existing))
    for above in (real, *real.parents):
        why = _unsafe(os.fspath(above), uid, leaf=False)
        if why is not None:
            return why
    return None


def _create(path: Path) -> None:
    """Create ``path`` and any missing folder above it, each with mode 0700."""
    missing = []
    for folder in (path, *path.parents):
        if os.path.lexists(folder):
            break
        missing.append(folder)
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o700)


def private_folder(path: Path | None, what: str) -> Path | None:
    """``path``, created if missing, if only this user can write it; else None (with a note).

    ``what`` names the cache in the note (``"JAX's persistent compilation cache"``).
    """
    if path is None:
        return None
    if not path.is_absolute():
        note(f"{what}: {path} is not an absolute path: not used")
        return None
    uid = _uid()
    why = _above_unsafe(path, uid)  # before creating anything there
    if why is None:
        try:
            _create(path)
        except OSError as err:
            note(f"{what}: cannot create {path} ({err.strerror}): not used")
            return None
        why = _unsafe(os.fspath(path), uid, leaf=True) or _above_unsafe(path, uid)
    if why is not None:
        note(f"{what}: {path} {why}, so it is not used (only a folder only you can write is)")
        return None
    return path


__all__ = ["cache_home", "configured", "note", "private_folder"]
