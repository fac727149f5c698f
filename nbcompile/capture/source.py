"""Where the compiled code came from: the visible cell and its line numbering.

Cell bodies are compiled so that line numbers in code objects *are* the visible cell lines
(the ``%%compile`` line is line 1), so mapping a (file, line) pair back to the cell is a
file-name comparison. Code from other files keeps its own file and line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Cell files are named from a hash of the cell's code (plus a PID or execution count that
# changes between kernels): ipykernel "/tmp/ipykernel_<pid>/<hash>.py", IPython
# "<ipython-input-<n>-<hash>>". Same hash, same code, same line numbers.
_CELL_FILE = re.compile(r"(?:ipykernel_\d+[/\\](\w+\.py)|<ipython-input-\d+-(\w+)>)$")


def cell_identity(file: str) -> str:
    """What identifies a cell file's *content*: its code hash, else the path itself."""
    match = _CELL_FILE.search(file)
    return (match.group(1) or match.group(2)) if match else file


@dataclass(frozen=True)
class SourceInfo:
    """The source of a compiled target.

    ``filename`` is the ``co_filename`` of code defined in the cell (``None`` when the target was
    not defined in a cell); ``text`` the visible cell text, ``%%compile`` line included, so
    ``lines[i - 1]`` is visible line ``i``.
    """

    filename: str | None = None
    text: str = ""
    other_files: tuple[str, ...] = field(default_factory=tuple)

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

    def line_text(self, line: int) -> str:
        lines = self.lines
        return lines[line - 1] if 1 <= line <= len(lines) else ""

    def to_json(self) -> dict:
        return {"filename": self.filename, "lines": self.lines}


def source_of_function(fn: object) -> SourceInfo:
    """SourceInfo for a function defined in a file (not a cell): its whole file, if readable."""
    import inspect
    import linecache

    code = getattr(inspect.unwrap(fn), "__code__", None) if callable(fn) else None
    if code is None:
        return SourceInfo()
    text = "".join(linecache.getlines(code.co_filename))
    return SourceInfo(filename=code.co_filename, text=text)
