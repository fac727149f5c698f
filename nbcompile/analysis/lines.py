"""Fast (file, line) -> visible cell line mapping for a SourceInfo (computed once per analysis)."""

from __future__ import annotations

from ..capture.source import SourceInfo


class LineMap:
    """Same answers as ``SourceInfo.visible_line`` without re-splitting the text per call."""

    def __init__(self, source: SourceInfo) -> None:
        self.filename = source.filename
        self.count = max(len(source.lines), 1)

    def visible_line(self, file: str | None, line: int | None) -> int | None:
        if line is None or file is None or self.filename is None or file != self.filename:
            return None
        return line if 1 <= line <= self.count else None
