"""Fast (file, line) -> visible cell line mapping for a SourceInfo (computed once per analysis)."""

from __future__ import annotations

from ..capture.source import SourceInfo


class LineMap:
    """Same answers as ``SourceInfo.visible_line`` without re-splitting the text per call."""

    def __init__(self, source: SourceInfo) -> None:
        self.source = source
        self.filename = source.filename
        self.count = max(len(source.lines), 1)
        self._is_cell: dict[str, bool] = {}

    def is_cell_file(self, file: str) -> bool:
        # HLO restored from JAX's persistent cache names the cell file as the kernel that first
        # compiled it did; SourceInfo matches such names by the cell's code hash.
        known = self._is_cell.get(file)
        if known is None:
            known = self._is_cell[file] = self.source.is_cell_file(file)
        return known

    def visible_line(self, file: str | None, line: int | None) -> int | None:
        if line is None or file is None or self.filename is None:
            return None
        if file != self.filename and not self.is_cell_file(file):
            return None
        return line if 1 <= line <= self.count else None
