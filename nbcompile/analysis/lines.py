"""Source stacks -> :class:`~nbcompile.capture.source.Location` and compiling-cell lines.

One :class:`Locator` per analysis. For a source stack (innermost frame first, as HLO metadata
and jaxpr tracebacks give it) it answers two things at once:

* the *location*: the nearest frame in the user's own code (a cell of this kernel, or a file
  outside Python's library folders and nbcompile), with the innermost library frame below it
  kept as ``detail`` (``flax/nnx/nn/linear.py:889``);
* the *visible line* of the compiling cell (``Fusion.source_lines``, the ``%%compile`` cell's
  numbering), from the innermost frame in that cell at any depth.

A stack is read only up to nbcompile's tracing frames: what lies beyond them called nbcompile (the
notebook's ``get_ipython().run_cell_magic(...)`` line, a script), not the program. The ops of
a library model called directly (``lin(x)``, a Keras functional model: no user frame at all)
are located at the model's own code, the innermost library frame (``equinox/nn/
_linear.py:99``), and in the compiling cell at the example call's line.

Every answer is cached (per file, per HLO stack-frame id), so resolving all ops of a program is
linear in its size.
"""

from __future__ import annotations

import os
from typing import Any

from ..capture.source import CellFiles, Location, SourceInfo, short_path
from ..capture.userfiles import is_user_file
from . import _jax
from .hlo import HloModule, Instruction

__all__ = ["Locator"]

Stack = tuple[tuple[str, int], ...]
_NONE: tuple[Location | None, int | None] = (None, None)
_JAX, _LIBRARY, _USER, _COMPILING, _OURS = range(5)  # kinds of code in a traceback
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # nbcompile
# nbcompile's modules that start a trace: their frames and all beyond called the program (its
# adapters and call recorders, inside the program, are library frames like any other)
_CALLERS = tuple(
    _PACKAGE + name for name in ("stages" + os.sep, "pipeline.py", "session.py", "magic.py")
)


def _is_ours(file: str) -> bool:
    """Whether ``file`` is where nbcompile started the trace: the frames that called the
    program."""
    return file.startswith(_CALLERS)


class Locator:
    """Locations and compiling-cell lines of source stacks (same answers as
    ``SourceInfo.visible_line`` for the compiling cell, without re-splitting its text)."""

    def __init__(self, source: SourceInfo) -> None:
        self.source = source
        self.filename = source.filename
        self.count = max(len(source.lines), 1)
        self.cells = CellFiles(source.cells)
        self._is_cell: dict[str, bool] = {}
        self._user: dict[str, bool] = {}
        self._cell: dict[str, tuple[int | None, str]] = {}
        self._frames: dict[tuple[int, int], tuple[Location | None, int | None]] = {}
        self._kinds: dict[int, int] = {}  # id(code object) -> kind

    # --- files ---------------------------------------------------------------------------------
    def is_cell_file(self, file: str) -> bool:
        """Whether ``file`` is the compiling cell (also as an earlier kernel named it)."""
        known = self._is_cell.get(file)
        if known is None:
            known = self._is_cell[file] = self.source.is_cell_file(file)
        return known

    def is_user(self, file: str) -> bool:
        known = self._user.get(file)
        if known is None:
            known = self._user[file] = (
                file == self.filename or self.is_cell_file(file) or is_user_file(file)
            )
        return known

    def visible_line(self, file: str | None, line: int | None) -> int | None:
        if line is None or file is None or self.filename is None:
            return None
        if file != self.filename and not self.is_cell_file(file):
            return None
        return line if 1 <= line <= self.count else None

    def location(self, file: str, line: int, detail: tuple[str, int] | None = None) -> Location:
        # a cell under its name in this kernel (HLO from JAX's persistent cache names the
        # files of the kernel that compiled it), so one cell is one source
        resolved = self._cell.get(file)
        if resolved is None:
            resolved = self._cell[file] = self.cells.resolve(file)
        shown = f"{short_path(detail[0])}:{detail[1]}" if detail is not None else None
        return Location(resolved[0], resolved[1], line, shown)

    # --- stacks --------------------------------------------------------------------------------
    def resolve(self, stack: Stack) -> tuple[Location | None, int | None]:
        """(nearest user location, compiling-cell line) of a stack, innermost frame first."""
        if not stack:
            return _NONE
        location = visible = library = None
        for file, line in stack:
            if _is_ours(file):
                if location is None and library is not None and self.source.library_call:
                    return self._library_model(library)
                break
            if location is None and self.is_user(file):
                location = self.location(file, line, library)
            elif location is None and library is None and not file.startswith(_PACKAGE):
                library = (file, line)
            if visible is None:
                visible = self.visible_line(file, line)
            if location is not None and (visible is not None or self.filename is None):
                break
        return location, visible

    def _library_model(self, frame: tuple[str, int]) -> tuple[Location, int | None]:
        """A whole stack, up to nbcompile's frames, without user frames, of a library model
        called directly (``SourceInfo.library_call``): located at the model's own code, and
        at the example call's line of the compiling cell. (A stack cut short, as JAX records
        those inside ``vmap`` or a ``cond`` branch, keeps no location: it is inferred from
        its neighbours.)"""
        call = self.source.library_call
        return self.location(*frame), call if call and 1 <= call <= self.count else None

    def of_instruction(
        self, module: HloModule, instr: Instruction
    ) -> tuple[Location | None, int | None]:
        """:meth:`resolve` of an HLO instruction's stack, cached per stack-frame id."""
        frame = instr.stack_frame_id
        if frame is None:
            return self.resolve(module.stack(instr))
        key = (id(module), frame)
        found = self._frames.get(key)
        if found is None:
            found = self._frames[key] = self.resolve(module.stack(instr))
        return found

    def of_traceback(self, traceback: Any) -> tuple[Location | None, int | None]:
        """:meth:`resolve` of a jaxpr equation's traceback (which, unlike HLO metadata, still
        holds JAX's own frames): the innermost frame outside JAX and the user's code is kept
        as detail. Line numbers are computed only for the frames used; what kind of code each
        code object is, is looked up once per analysis."""
        frames = _jax.frames(traceback)
        if frames is None:
            return _NONE
        codes, lastis = frames
        kinds = self._kinds
        location = visible = library = None
        for i, code in enumerate(codes):
            kind = kinds.get(id(code))
            if kind is None:
                kind = kinds[id(code)] = self._kind(code.co_filename)
            if kind == _OURS:
                if location is None and library is not None and self.source.library_call:
                    return self._library_model(library)
                break
            if kind == _JAX:
                continue
            if kind == _LIBRARY:
                if (
                    library is None
                    and location is None
                    and not code.co_filename.startswith(_PACKAGE)
                ):
                    library = (code.co_filename, _jax.addr2line(code, lastis[i]))
                continue
            line = _jax.addr2line(code, lastis[i])
            if location is None:
                location = self.location(code.co_filename, line, library)
            if kind == _COMPILING:
                visible = self.visible_line(code.co_filename, line)
            if visible is not None or self.filename is None:
                break
        return location, visible

    def _kind(self, file: str) -> int:
        if _is_ours(file):
            return _OURS
        if not self.is_user(file):
            return _LIBRARY if _jax.outside_jax(file) else _JAX
        if self.filename is not None and (file == self.filename or self.is_cell_file(file)):
            return _COMPILING
        return _USER
