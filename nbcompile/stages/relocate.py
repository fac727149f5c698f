"""The same program, its code in other places: XLA's executable kept, its lines re-read.

A run whose lowered program equals an earlier run's except for source locations (a comment
added above the model, a cell edited elsewhere: every line moves) needs no XLA compile — XLA
would make the same executable — but the view reads its lines from the executable's HLO
metadata, which names the old places. :func:`relocate_hlo` rewrites that metadata: both runs'
StableHLO modules are printed with their locations, their operations paired one for one (the
programs are the same, so their printed operations are too, but for their locations), and each
of the old program's source lines (file, function, line: XLA keeps one source row per line) is
mapped to the line the same operations have now. The executable's source tables (``FileNames``,
``FunctionNames``, ``FileLocations``: what its ``stack_frame_id`` s point to) are rewritten with
the new frames; nothing else changes. Where the pairing is not one for one (a line split in two,
a function renamed so the operations' names differ, a frame added by a new helper function),
None: the caller compiles. So are two old operations on one line that are on two lines now
(``jnp.mean(x)`` written as a sum and a division): which is which, the executable cannot say.

Measured (2 loaded cores, JAX 0.12): a comment added above a 12-layer train step, 4.8 s with
the executable reused against 13.9 s compiled again; the GPT-2-small train step 12.3 s against
21.2 s, of which this rewrite 1.2 s (docs/guide.md; ``python -m benchmarks --only magic``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

__all__ = ["relocate_hlo"]

Frame = tuple[str, str, int, int, int, int]  # file, function, line, end line, column, end column

_ALIAS = re.compile(r"#loc\d*\b")
_STRING = r'"((?:[^"\\]|\\.)*)"'
_FILE = re.compile(_STRING + r":(\d+):(\d+)(?: to (\d+)?:(\d+))?$")
_NAMED = re.compile(_STRING + r"(?:\((.*)\))?$")
_CALLSITE = re.compile(r"callsite\((#loc\d*) at (#loc\d*)\)$")
_FUSED = re.compile(r"fused(?:<[^>]*>)?\[(.*)\]$")
_ROW = re.compile(r"(\d+) (.*)$")
_FRAME_ROW = re.compile(r"\{file_location_id=(\d+) parent_frame_id=(\d+)\}$")
_LOCATION_ROW = re.compile(
    r"\{file_name_id=(\d+) function_name_id=(\d+) line=(\d+) end_line=(\d+) "
    r"column=(\d+) end_column=(\d+)\}$"
)


class _Unpaired(Exception):
    """The two programs' operations or locations do not pair one for one."""


class _Module:
    """A printed module: its operation lines (locations replaced) and its location aliases."""

    def __init__(self, module: Any) -> None:
        asm = module.operation.get_asm(enable_debug_info=True, large_elements_limit=16)
        self.aliases: dict[str, str] = {}
        self.lines: list[str] = []
        for line in asm.split("\n"):
            if line.startswith("#loc"):
                name, _, value = line.partition(" = ")
                self.aliases[name] = value[4:-1] if value.startswith("loc(") else value
            else:
                self.lines.append(line)
        self._resolved: dict[str, tuple[tuple[str, ...], tuple[Frame, ...]]] = {}

    def resolve(self, ref: str) -> tuple[tuple[str, ...], tuple[Frame, ...]]:
        """(operation names, source frames innermost first) of a location alias or text."""
        known = self._resolved.get(ref)
        if known is not None:
            return known
        body = self.aliases.get(ref, ref)
        site = _CALLSITE.match(body)
        fused = _FUSED.match(body) if site is None else None
        file = _FILE.match(body) if site is None and fused is None else None
        named = _NAMED.match(body) if site is None and fused is None and file is None else None
        names: tuple[str, ...] = ()
        frames: tuple[Frame, ...] = ()
        if site is not None:
            for part in site.groups():
                n, f = self.resolve(part)
                names, frames = names + n, frames + f
        elif fused is not None:
            for part in _ALIAS.findall(fused.group(1)):
                n, f = self.resolve(part)
                names, frames = names + n, frames + f
            names += (_ALIAS.sub("#", fused.group(1)),)
        elif file is not None:
            frames = (_frame(file, ""),)
        elif named is not None and named.group(2):
            child = named.group(2)
            inner = _FILE.match(self.aliases.get(child, ""))
            if inner is not None:  # a frame: its function's name around its file:line
                frames = (_frame(inner, named.group(1)),)
            else:  # an operation's name around its call stack
                n, frames = self.resolve(child)
                names = (named.group(1), *n)
        elif body != "unknown":
            names = (body,)
        self._resolved[ref] = (names, frames)
        return names, frames


def _frame(match: re.Match[str], function: str) -> Frame:
    file, line, column, end_line, end_column = match.groups()
    start = int(line)
    return (
        file,
        function,
        start,
        int(end_line) if end_line else start,
        int(column),
        int(end_column) if end_column else int(column),
    )


def _pair(old: _Module, new: _Module) -> dict[tuple[str, str, int], Frame]:
    """Each old frame's (file, function, line) -> the frame the same operations have in the new
    module (one new line for each old one, or :class:`_Unpaired`)."""
    if len(old.lines) != len(new.lines):
        raise _Unpaired("different operations")
    mapping: dict[tuple[str, str, int], Frame] = {}
    for a, b in zip(old.lines, new.lines, strict=True):
        # (equal lines too: an alias's number says nothing of what it stands for)
        refs_a, refs_b = _ALIAS.findall(a), _ALIAS.findall(b)
        if _ALIAS.sub("#", a) != _ALIAS.sub("#", b) or len(refs_a) != len(refs_b):
            # an operation (or a location written in place) that is not the same
            raise _Unpaired("different operations")
        for ra, rb in zip(refs_a, refs_b, strict=True):
            names_a, frames_a = old.resolve(ra)
            names_b, frames_b = new.resolve(rb)
            if names_a != names_b or len(frames_a) != len(frames_b):
                raise _Unpaired("operations named or nested differently")
            for fa, fb in zip(frames_a, frames_b, strict=True):
                # by line: XLA keeps one source row per file, function and line (the first
                # operation's columns), so a line is the finest place its metadata can name
                if mapping.setdefault(fa[:3], fb)[:3] != fb[:3]:
                    raise _Unpaired("one old line is two new ones")
    return mapping


def _callers(stack: dict[int, tuple[int, int]], ours: set[int]) -> set[int]:
    """The locations only frames that called the program have: frames at a location in
    ``ours`` (nbcompile's tracing frames) and every frame outward of them (their parents)."""
    outer: set[int] = set()
    for frame, (location, _parent) in stack.items():
        if location in ours:
            while frame in stack and frame not in outer:
                outer.add(frame)
                frame = stack[frame][1]
    inner = {location for frame, (location, _p) in stack.items() if frame not in outer}
    return {stack[frame][0] for frame in outer} - inner


def relocate_hlo(
    hlo_text: str,
    old_module: Any,
    new_module: Any,
    normalize: Callable[[str], str] = lambda file: file,
    cut: Callable[[str], bool] = lambda _file: False,
) -> str | None:
    """``hlo_text`` (the optimised HLO of ``old_module``'s executable) with its source tables
    rewritten to ``new_module``'s places (see the module docstring); None where the two
    modules do not pair one for one or the tables are not in the form this reads (JAX >= 0.9
    prints ``FileNames``/``FunctionNames``/``FileLocations``/``StackFrames``; checked with JAX
    0.10.2 and 0.12.0.1).

    An executable served by JAX's persistent cache names the places of the process that
    compiled it: the same as ``old_module``'s once files go through ``normalize`` (a notebook
    cell by its content, as the cache key has them), up to the frames that called the program
    (``cut`` names nbcompile's tracing frames; the key leaves them and their callers out).
    Places are matched through ``normalize``, and frames from the first ``cut`` one outward,
    which the view never reads, are kept as they are where they have no match."""
    try:
        mapping = _pair(_Module(old_module), _Module(new_module))
    except _Unpaired:
        return None
    loose = {(normalize(k[0]), *k[1:]): v for k, v in mapping.items()}
    lines = hlo_text.split("\n")
    sections: dict[str, dict[int, str]] = {"FileNames": {}, "FunctionNames": {}}
    rows: dict[int, tuple[int, tuple[int, ...]]] = {}  # FileLocations: id -> (line index, row)
    stack: dict[int, tuple[int, int]] = {}  # StackFrames: frame -> (location, parent frame)
    section, end = None, 0
    for i, line in enumerate(lines):
        if line.startswith(("%", "ENTRY", "ROOT")):  # the computations: the tables are over
            break
        end = i + 1
        if line in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            section = line
            continue
        row = _ROW.match(line)
        if not line or row is None or section is None:
            continue
        number, value = int(row.group(1)), row.group(2)
        if section in sections:
            quoted = re.fullmatch(_STRING, value)
            if quoted is None:
                return None
            sections[section][number] = quoted.group(1)
        elif section == "FileLocations":
            location = _LOCATION_ROW.match(value)
            if location is None:
                return None
            rows[number] = (i, tuple(map(int, location.groups())))
        elif section == "StackFrames":
            frame = _FRAME_ROW.match(value)
            if frame is None:
                return None
            # the text printer writes parent_frame_id one more than the parent's id (0: none)
            stack[number] = (int(frame.group(1)), int(frame.group(2)) - 1)
    if not rows:
        return None  # no table to rewrite: the executable's places are not read this way
    files, functions = sections["FileNames"], sections["FunctionNames"]
    ids = {
        "FileNames": {v: k for k, v in files.items()},
        "FunctionNames": {v: k for k, v in functions.items()},
    }
    added: dict[str, list[str]] = {"FileNames": [], "FunctionNames": []}

    def id_of(section: str, value: str) -> int:
        known = ids[section].get(value)
        if known is None:
            known = ids[section][value] = max([0, *ids[section].values()]) + 1
            added[section].append(f'{known} "{value}"')
        return known

    callers = _callers(stack, {k for k, (_, r) in rows.items() if cut(files.get(r[0], ""))})
    for number, (i, (fid, fnid, line, *_columns)) in rows.items():
        file, function = files.get(fid), functions.get(fnid)
        if file is None or function is None:
            return None
        new = mapping.get((file, function, line)) or loose.get((normalize(file), function, line))
        if new is None:
            if number in callers:
                continue  # a frame that called the program: the view does not read it
            return None  # a place of the executable the old module does not have
        lines[i] = (
            f"{number} {{file_name_id={id_of('FileNames', new[0])} "
            f"function_name_id={id_of('FunctionNames', new[1])} line={new[2]} "
            f"end_line={new[3]} column={new[4]} end_column={new[5]}}}"
        )
    out = lines[:end]
    for section in ("FileNames", "FunctionNames"):
        if added[section]:
            at = out.index(section) + 1
            while at < len(out) and _ROW.match(out[at]):
                at += 1
            out[at:at] = added[section]
    return "\n".join(out + lines[end:])
