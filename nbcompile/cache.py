"""nbcompile's in-process cache of compiled programs, and JAX's persistent cache.

The key is the program (SPEC §9.2): every ``%%compile`` run traces and lowers, and
:func:`nbcompile.stages.key.program_key` digests the lowered module — operations, constants,
source locations — with what else shapes the executable (compile options, target, versions).
A hit is the same program by construction; what the traced code read (globals, class
attributes, a module's functions, closures, configs, a model's structure and flags) is in the
program, so nothing else has to be followed. Values that are inputs (weights, example arrays)
are not in the program: every run reads them live, so a re-run after new weights or Keras
``predict`` compiles nothing and computes with the live objects.

JAX's persistent cache gets the same rule for the locations it leaves out of its own key
(``_compat.key_persistent_cache_by_locations``, installed by nbcompile.stages).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax

from . import _compat, _dirs
from .stages.key import ProgramKey, cell_digest, program_key

__all__ = ["CompilationCache", "ProgramKey", "enable_persistent_cache", "program_key"]


class CompilationCache:
    """A small LRU of compiled programs by :class:`~nbcompile.stages.key.ProgramKey`.

    Looked up by the key's cheap ``exact`` digest first, then by its ``identity`` (computed
    only on a miss of the first: the same program, with cell files by content, whose exact
    digest differed in a cell file name's length or in who called nbcompile). ``exact``
    digests of an entry are remembered so the next re-run finds it by the cheap one, and so
    are a probe's digests (:meth:`alias`: the run's trace without call recording).
    """

    def __init__(self, size: int = 64, on_evict: Callable[[Any], None] | None = None) -> None:
        self.size = size
        self._on_evict = on_evict  # told each program the cache lets go of (evicted, cleared)
        self._items: OrderedDict[str, Any] = OrderedDict()  # identity -> Program
        self._exact: dict[str, str] = {}  # exact digest -> identity
        self._cells: dict[str, str] = {}  # identity -> the cell_digest it was stored from
        self._executables: dict[str, str] = {}  # executable digest -> identity

    def knows(self, cell: str, options: str) -> bool:
        """Whether a program was stored from this cell text and these options: its re-run may
        probe with a cheaper trace (session.py)."""
        return cell_digest(cell, options) in self._cells.values()

    def same_executable(self, key: ProgramKey) -> Any | None:
        """A stored program whose executable ``key``'s program would get from XLA (the same
        program, its code elsewhere: ``ProgramKey.executable``), else None."""
        if not key.cacheable:
            return None
        key.complete()
        identity = self._executables.get(key.executable or "")
        return self._items.get(identity) if identity is not None else None

    def alias(self, other: ProgramKey, key: ProgramKey) -> None:
        """Find ``key``'s program by ``other`` too (a trace of the same run without the call
        recording: the same program, other operation names)."""
        identity = self._exact.get(key.exact)
        if not other.cacheable or identity not in self._items:
            return
        self._exact[other.exact] = identity
        if other.program is not None:  # its slower digests were computed: also found by them
            self._exact[other.identity] = identity

    def get(self, key: ProgramKey) -> Any | None:
        """The program stored under ``key``, else None (never for an uncacheable key)."""
        if not key.cacheable:
            return None
        identity = self._exact.get(key.exact)
        if identity is None or identity not in self._items:
            identity = key.identity  # computes the slower digests
            identity = self._exact.get(identity, identity)  # a probe's, aliased
            if identity not in self._items:
                return None
            self._exact[key.exact] = identity
        # the key of the program found: a probe's (traced without the call recording, so its
        # operations are named otherwise, and its location digest differs) is the recorded
        # program's, so the history sees the same program in the same places as last time
        key.program, _, key.locations = identity.partition(":")
        self._items.move_to_end(identity)
        return self._items[identity]

    def put(self, key: ProgramKey, value: Any) -> None:
        if not key.cacheable:
            return
        identity = key.identity
        self._items[identity] = value
        self._items.move_to_end(identity)
        self._exact[key.exact] = identity
        self._cells[identity] = key.cell
        if key.executable is not None:
            self._executables[key.executable] = identity
        while len(self._items) > self.size:
            gone, program = self._items.popitem(last=False)
            self._cells.pop(gone, None)
            self._executables = {k: v for k, v in self._executables.items() if v != gone}
            if self._on_evict is not None:
                self._on_evict(program)
            del program
        if len(self._exact) > 4 * self.size:
            self._exact = {k: v for k, v in self._exact.items() if v in self._items}

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        programs = list(self._items.values())
        self._items.clear()
        if self._on_evict is not None:
            while programs:
                self._on_evict(programs.pop())
        self._exact.clear()
        self._cells.clear()
        self._executables.clear()


def enable_persistent_cache(directory: str | os.PathLike[str] | None = None) -> Path | None:
    """Point JAX's persistent compilation cache at a per-user folder (unless already set).

    ``directory``, else ``$NBCOMPILE_CACHE_DIR``, else ``$XDG_CACHE_HOME/nbcompile/jax`` (an
    absolute ``XDG_CACHE_HOME`` only), else ``~/.cache/nbcompile/jax``. The cache holds native
    code that later processes run, so it is used only if it is a folder only this user can
    write (``nbcompile._dirs``), and only where its key can cover source locations
    (:func:`~nbcompile._compat.persistent_cache_keyed`); otherwise nothing is switched on
    (None, with a note).
    """
    if jax.config.jax_compilation_cache_dir:
        return Path(jax.config.jax_compilation_cache_dir)
    what = "JAX's persistent compilation cache"
    if not _compat.persistent_cache_keyed():
        # its executables would name the lines of whichever kernel compiled them first
        _dirs.note(
            f"{what} stays off: this JAX ({jax.__version__}) has no "
            "jax._src.compiler._get_cache_key for nbcompile to add source locations to its key"
        )
        return None
    if directory:
        base: Path | None = Path(directory)
    else:
        base = _dirs.configured("NBCOMPILE_CACHE_DIR", "nbcompile", "jax")
    path = _dirs.private_folder(base, what)
    if path is None:
        return None
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
    return path
