"""The cache key of a ``%%compile`` run: the lowered program itself (SPEC §9.2).

Every run traces and lowers; the key is computed from what that produced, never from a walk of
Python objects. A key covers:

- the lowered StableHLO module's bytecode: every operation, every constant (a global array, a
  class attribute, a closed-over scalar: whatever the code read is in the program) and every
  source location (file, line, column and function of each frame: the lines the view shows);
- what shapes the executable besides the module (:func:`~nbcompile._compat.lowering_facts`:
  pytree structure, shardings, layouts, donation, devices, ``XLA_FLAGS``, JAX's compile
  options);
- the run's context (the ``%%compile`` cell's text and options, whose call line the view
  names), nbcompile/JAX/jaxlib versions.

Two digests of the same key, so that a re-run costs little more than its trace and lowering:

- ``exact``: the bytecode with each notebook cell's file name replaced by its content hash
  (IPython names a cell ``<ipython-input-7-…>`` after its execution count; ipykernel after its
  content and the kernel's process id) — one serialisation in C++ and one hash, ~1 % of the
  trace and lowering of a GPT-2-small train step. The replacement is done on the bytes; a file
  name whose length changed (``-9-`` to ``-10-``) changes a length field too, so the digest may
  differ for equal programs (a miss of this digest only, never a false hit);
- ``identity`` (computed on a miss of ``exact``): the program without locations
  (:func:`~nbcompile._compat.stripped_bytecode`) and the locations as the view reads them
  (:func:`~nbcompile._compat.location_digest`: cell files by content, each call stack cut where
  nbcompile's tracing frames start — JAX also records whatever called nbcompile, IPython's
  machinery, a test, a script, which changes no line the view shows), kept apart so a run whose
  program is the same but whose code moved (a comment above the model) is told apart from a
  changed program. ``exact`` differs where only those callers differ (a cell run from another
  place of a script): a miss of that digest only, found again by ``identity``.

A program that calls back into Python is never served from the cache (``cacheable`` False:
its module names the callback by index, not by what it does).
"""

from __future__ import annotations

import hashlib
import linecache
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jax

from .. import _compat
from ..capture.source import cell_identity

__all__ = ["ProgramKey", "cell_digest", "misnumbered", "program_key"]

# cell file names as they appear in the bytecode's strings (see capture.source._CELL_FILE)
_CELL_NAME = re.compile(rb"<ipython-input-\d+-(\w+)>|ipykernel_\d+[/\\](\w+\.py)")


def _cell_content(match: re.Match[bytes]) -> bytes:
    return b"<cell " + (match.group(1) or match.group(2)) + b">"


def _digest(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


@dataclass
class ProgramKey:
    """The key of one run's lowered program(s) (see the module docstring).

    ``program`` and ``locations`` are None until :meth:`complete` computes them;
    ``seconds`` is the time spent computing the key so far.
    """

    exact: str
    cacheable: bool
    context: str = field(repr=False)
    cell: str = ""  # the run's context alone (cell_digest): which cell and options
    compile_context: str = field(default="", repr=False)  # the context without the cell text
    lowered: tuple[Any, ...] = field(default=(), repr=False)
    program: str | None = None
    locations: str | None = None
    executable: str | None = None  # the program without the cell text: what XLA makes of it
    seconds: float = 0.0

    def complete(self) -> ProgramKey:
        """Compute ``program`` and ``locations`` (once)."""
        if self.program is None:
            if not self.lowered:
                raise RuntimeError("ProgramKey.complete() after release()")
            t0 = time.perf_counter()
            from . import called_the_program

            stripped = [_compat.stripped_bytecode(lowered) for lowered in self.lowered]
            self.program = _digest(self.context, *stripped)
            self.executable = _digest(self.compile_context, *stripped)
            self.locations = _digest(
                *(
                    _compat.location_digest(
                        lowered.compiler_ir("stablehlo"), cell_identity, called_the_program
                    )
                    for lowered in self.lowered
                )
            )
            self.seconds += time.perf_counter() - t0
        return self

    @property
    def identity(self) -> str:
        """``program`` and ``locations`` together: equal for the same program whose code is in
        the same places (cells by content)."""
        self.complete()
        return f"{self.program}:{self.locations}"

    def release(self) -> None:
        """Drop the lowered modules (a key kept in the cache or the history holds digests)."""
        self.lowered = ()


def misnumbered(closed_jaxpr: Any) -> list[str]:
    """A note for each function of the user's files the traced program ran whose line numbers
    do not start at its ``def``: IPython's deduperreload (``%autoreload 2``, IPython >= 9)
    compiled it from unparsed text, so the lines Python reports for it, and the view with them,
    count from the top of the file (ipython/ipython#15359). Only looked for while that
    reloader is on."""
    if not _compat.autoreload_dedupes():
        return []
    from jax.extend import core as jex_core

    from ..capture.source import is_cell_file, short_path
    from ..capture.userfiles import is_user_file

    seen: set[int] = set()
    codes: dict[Any, None] = {}
    todo = [getattr(closed_jaxpr, "jaxpr", closed_jaxpr)]
    while todo:
        jaxpr = todo.pop()
        for eqn in jaxpr.eqns:
            todo += [getattr(j, "jaxpr", j) for j in jex_core.jaxprs_in_params(eqn.params)]
            traceback = eqn.source_info.traceback
            if traceback is not None and id(traceback) not in seen:
                seen.add(id(traceback))
                codes.update(dict.fromkeys(_compat.traceback_codes(traceback)))
    notes = []
    for code in codes:
        file = code.co_filename
        if is_cell_file(file) or not is_user_file(file) or code.co_name.startswith("<"):
            continue
        first = linecache.getline(file, code.co_firstlineno).strip()
        if first.startswith(("def ", "async def ", "@")):
            continue
        notes.append(
            f"`{code.co_name}` ({short_path(file)}): IPython's %autoreload compiled its new code "
            "without its line numbers (deduperreload, ipython/ipython#15359), so the lines shown "
            "for it are not its lines; run `%autoreload 2 --full` (a reloader that keeps them) "
            "and save the file again"
        )
    return notes


def cell_digest(cell: str, options: str) -> str:
    """The digest of a run's context (cell text and options) alone."""
    return _digest("cell", cell, options)


def program_key(lowered: Sequence[Any], *, cell: str, options: str) -> ProgramKey:
    """The key of ``lowered`` (the ``jax.stages.Lowered`` of a run: the program, and with
    ``--grad`` its ``value_and_grad``) compiled from ``cell`` (the ``%%compile`` cell's text,
    whose lines the view names) with ``options`` (those that shape the program)."""
    from .. import __version__

    t0 = time.perf_counter()
    versions = f"nbcompile={__version__} jax={jax.__version__} jaxlib={jax.lib.__version__}"
    parts: list[bytes | str] = [cell, options, versions]
    cacheable = True
    for one in lowered:
        facts, ok = _compat.lowering_facts(one)
        cacheable = cacheable and ok
        parts += [facts, _CELL_NAME.sub(_cell_content, _compat.module_bytecode(one))]
    facts = parts[3::2]
    return ProgramKey(
        exact=_digest(*parts),
        cacheable=cacheable,
        context=_digest(cell, options, versions, *facts),
        compile_context=_digest(options, versions, *facts),
        cell=cell_digest(cell, options),
        lowered=tuple(lowered),
        seconds=time.perf_counter() - t0,
    )
