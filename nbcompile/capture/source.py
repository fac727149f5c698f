"""Where the compiled code came from: the cells of the kernel, user files, and their lines.

Cell bodies are compiled so that line numbers in code objects *are* the visible cell lines
(the ``%%compile`` line is line 1), so mapping a (file, line) pair back to a cell is a file-name
lookup. :class:`Location` is the one form every per-line result uses (fusions, kernels, profile,
memory): a notebook cell's execution count and line (``In [3] line 7``), or a user file and line
(``model.py:12``). Cells are known through a plain ``{cell file name: execution count}`` mapping
that the IPython layer passes in (nothing here imports IPython).
"""

from __future__ import annotations

import functools
import linecache
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CellFiles",
    "Location",
    "SourceInfo",
    "cell_identity",
    "is_cell_file",
    "short_path",
    "source_of_function",
]

# Cell files are named from a hash of the cell's code (plus a PID or execution count that
# changes between kernels): ipykernel "/tmp/ipykernel_<pid>/<hash>.py", IPython
# "<ipython-input-<n>-<hash>>". Same hash, same code, same line numbers.
_CELL_FILE = re.compile(r"(?:ipykernel_\d+[/\\](\w+\.py)|<ipython-input-\d+-(\w+)>)$")
_INPUT_NUMBER = re.compile(r"^<ipython-input-(\d+)-\w+>$")


def cell_identity(file: str) -> str:
    """What identifies a cell file's *content*: its code hash, else the path itself."""
    match = _CELL_FILE.search(file)
    return (match.group(1) or match.group(2)) if match else file


def is_cell_file(file: str | None) -> bool:
    """Whether ``file`` is the file name IPython or ipykernel gave a cell's code."""
    return bool(file) and _CELL_FILE.search(file) is not None


@functools.lru_cache(maxsize=4096)
def short_path(file: str) -> str:
    """A file as a reader knows it: relative to the import root or working folder that holds
    it (``flax/nnx/nn/linear.py``, ``model.py``), else its base name."""
    if file.startswith("<"):
        return file
    path = os.path.abspath(file)
    roots = [os.path.abspath(p or os.curdir) for p in sys.path] + [os.getcwd()]
    best = ""
    for root in roots:
        root = os.path.join(root, "")
        if path.startswith(root) and len(root) > len(best):
            best = root
    return path[len(best) :] if best else os.path.basename(path)


@dataclass(frozen=True)
class Location:
    """Where an op came from: the nearest frame in the user's own code.

    ``cell`` is the execution count of the notebook cell (``None`` for a file, or for a cell the
    kernel no longer knows), ``file`` the file name as compiled, ``line`` the line in it (for a
    cell: the visible cell line). ``detail`` is the innermost library frame below it, e.g.
    ``flax/nnx/nn/linear.py:889`` (not part of equality: one user line is one location).
    """

    cell: int | None
    file: str
    line: int
    detail: str | None = field(default=None, compare=False)

    @property
    def label(self) -> str:
        """``In [3] line 7`` for a cell, ``model.py:12`` for a file."""
        if self.cell is not None:
            return f"In [{self.cell}] line {self.line}"
        if is_cell_file(self.file):
            return f"In [?] line {self.line}"
        return f"{short_path(self.file)}:{self.line}"

    @property
    def source_label(self) -> str:
        """The cell or file alone: ``In [3]`` / ``model.py``."""
        return self.label.rsplit(" line ", 1)[0] if self.is_cell else short_path(self.file)

    @property
    def is_cell(self) -> bool:
        return self.cell is not None or is_cell_file(self.file)

    def sort_key(self) -> tuple[Any, ...]:
        return (self.cell is None, self.cell or 0, self.file, self.line)

    def to_json(self) -> dict[str, Any]:
        return {
            "cell": self.cell,
            "file": self.file,
            "line": self.line,
            "label": self.label,
            "detail": self.detail,
        }


class CellFiles:
    """The kernel's cells: cell file name -> execution count, as IPython's compiler registered
    them (``_compat.cell_files(shell)``); cell text comes from ``linecache``, where IPython puts
    it. A cell is matched by its content hash: an executable restored from JAX's persistent cache
    names the files of the kernel that compiled it, and a re-run of an unchanged cell is the same
    code, shown under its latest number."""

    def __init__(self, files: Mapping[str, int] | None = None) -> None:
        self.files = files if files is not None else {}

    def _latest(self, file: str) -> tuple[int, str] | None:
        """(count, file) of the latest run of the cell with ``file``'s content: a re-run of an
        unchanged cell is the same code (and ipykernel gives it the same file name)."""
        identity = cell_identity(file)
        best = None
        for name, count in list(self.files.items()):
            if (name == file or cell_identity(name) == identity) and (
                best is None or count > best[0]
            ):
                best = (int(count), name)
        return best

    def count(self, file: str) -> int | None:
        """The execution count of the cell compiled as ``file`` (None when unknown)."""
        return self.resolve(file)[0]

    def resolve(self, file: str) -> tuple[int | None, str]:
        """(execution count, file name in this kernel) of the cell compiled as ``file``; a
        file that is no known cell keeps its name."""
        latest = self._latest(file)
        if latest is not None:
            return latest
        number = _INPUT_NUMBER.match(file)
        return (int(number.group(1)) if number else None), file

    def lines(self, file: str) -> list[str]:
        """The text of the cell (or user file) ``file``, one string per line."""
        latest = self._latest(file)
        current = latest[1] if latest is not None else file
        return [line.rstrip("\n") for line in linecache.getlines(current)]


@dataclass(frozen=True)
class SourceInfo:
    """The source of a compiled target.

    ``filename`` is the ``co_filename`` of code defined in the cell (``None`` when the target was
    not defined in a cell); ``text`` the visible cell text, ``%%compile`` line included, so
    ``lines[i - 1]`` is visible line ``i``. ``cells`` (optional) maps the kernel's cell file
    names to execution counts, so that code from *other* cells is shown as ``In [n] line k``.
    ``library_call`` is the visible line of the example call when the target is a library
    model called directly (``lin(x)``, a Keras functional model): the program has no user
    frame, so its ops are located at that line.
    """

    filename: str | None = None
    text: str = ""
    other_files: tuple[str, ...] = field(default_factory=tuple)
    cells: Mapping[str, int] | None = field(default=None, compare=False, repr=False)
    library_call: int | None = field(default=None, compare=False)

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()

    def is_cell_file(self, file: str | None) -> bool:
        """Whether ``file`` is this cell's code, also as an earlier kernel named it (executables
        restored from JAX's persistent cache keep the file names of the process that compiled
        them)."""
        if file is None or self.filename is None:
            return False
        return file == self.filename or cell_identity(file) == cell_identity(self.filename) != file

    def visible_line(self, file: str | None, line: int | None) -> int | None:
        """The visible cell line of ``file:line``, or None when it is not in this cell."""
        if line is None or not self.is_cell_file(file):
            return None
        if 1 <= line <= max(len(self.lines), 1):
            return line
        return None

    def label_of(self, file: str | None, line: int | None) -> str | None:
        """How a user sees ``file:line``: ``line 4`` in this cell, ``In [3] line 2`` in another
        cell of the kernel, ``model.py:12`` in a file (None without a file and line)."""
        if file is None or line is None:
            return None
        visible = self.visible_line(file, line)
        if visible is not None:
            return f"line {visible}"
        count, name = CellFiles(self.cells).resolve(file)
        return Location(count, name, line).label

    def line_text(self, line: int) -> str:
        lines = self.lines
        return lines[line - 1] if 1 <= line <= len(lines) else ""

    def to_json(self) -> dict:
        return {"filename": self.filename, "lines": self.lines}


def source_of_function(fn: object, cells: Mapping[str, int] | None = None) -> SourceInfo:
    """SourceInfo for a function defined in a file or an earlier cell: its whole file, if
    readable (``cells`` as for :class:`SourceInfo`)."""
    import inspect

    code = getattr(inspect.unwrap(fn), "__code__", None) if callable(fn) else None
    if code is None:
        return SourceInfo(cells=cells)
    text = "".join(linecache.getlines(code.co_filename))
    return SourceInfo(filename=code.co_filename, text=text, cells=cells)
