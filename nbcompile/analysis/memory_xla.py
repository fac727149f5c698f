"""Readers for XLA's own memory dumps (pure text parsing; no compiling here).

A compile with ``compiler_options={"xla_dump_to": DIR}`` writes, per module,
``*-live-range.txt`` (the flattened schedule, every value's live range, the values live at the
moment XLA calls the peak), ``*-memory-usage-report.txt`` (allocations per memory space with
their total) and ``*-buffer-assignment.txt`` (which value sits in which allocation, at which
offset). nbcompile computes the same from the scheduled module (:mod:`.memory_live`); these
readers are how the tests prove it equal, and how a TPU program that XLA refused for lack of
HBM (``CompileTimeHbmOom``: it dumps the scheduled module before it gives up) is still mapped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = [
    "XlaAllocation",
    "XlaLiveRange",
    "hbm_oom_figures",
    "parse_buffer_assignment",
    "parse_live_range",
    "parse_memory_usage_report",
]

_SEQ = re.compile(r"^\s+(\d+):(\S+)$")
_RANGE = re.compile(r"^\s+(\S+\{[\d,]*\}):(\d+)-(\d+)$")
_AT = re.compile(r"^\s+Live ranges at (\d+) \(peak\):$")
_PEAK_VALUE = re.compile(r"^\s+(\S+\{[\d,]*\}): (\d+) bytes \(cumulative: (\d+) bytes\)$")
_SPACE = re.compile(r"^Memory Space: (\S+) \(color=(\d+)\)$")
_TOTAL = re.compile(r"^Total bytes: (\d+)")
_ALLOC = re.compile(r"^allocation (\d+): size (\d+)(.*):$")
_VALUE = re.compile(r"^\s*value: <\d+ (\S+) @\d+> \(size=(\d+),offset=(\d+)\): (.*)$")
_OOM = re.compile(
    r"required for HLO temporaries \(([\d.]+)([KMGT]?)\) exceeds available HBM "
    r"\(([\d.]+)([KMGT]?)\)"
)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


@dataclass
class XlaLiveRange:
    """``*-live-range.txt``: ``ranges`` maps ``instruction{index}`` to (start, end)."""

    sequence: list[str]
    ranges: dict[str, tuple[int, int]]
    peak_step: int | None
    peak_bytes: int | None  # the cumulative total XLA prints at its peak moment
    at_peak: dict[str, int] = field(default_factory=dict)


@dataclass
class XlaAllocation:
    """One allocation of ``*-buffer-assignment.txt``."""

    index: int
    size: int
    color: int
    flags: str  # "parameter 0", "maybe-live-out", "preallocated-temp", "constant", ...
    values: list[tuple[str, int, int, str]] = field(
        default_factory=list
    )  # name, size, offset, shape


def parse_live_range(text: str) -> XlaLiveRange:
    """Read ``*-live-range.txt``."""
    sequence: list[str] = []
    ranges: dict[str, tuple[int, int]] = {}
    at_peak: dict[str, int] = {}
    peak_step = peak_bytes = None
    for line in text.splitlines():
        if (m := _RANGE.match(line)) is not None:
            ranges[m.group(1)] = (int(m.group(2)), int(m.group(3)))
        elif (m := _SEQ.match(line)) is not None:
            sequence.append(m.group(2))
        elif (m := _AT.match(line)) is not None:
            peak_step = int(m.group(1))
        elif (m := _PEAK_VALUE.match(line)) is not None:
            at_peak[m.group(1)] = int(m.group(2))
            peak_bytes = int(m.group(3))
    return XlaLiveRange(sequence, ranges, peak_step, peak_bytes, at_peak)


def parse_memory_usage_report(text: str) -> dict[int, int]:
    """Read ``*-memory-usage-report.txt``: memory space colour -> total allocated bytes
    (colour 0 is device memory; on TPU 1 is VMEM, 2 SMEM)."""
    out: dict[int, int] = {}
    color = None
    for line in text.splitlines():
        if (m := _SPACE.match(line)) is not None:
            color = int(m.group(2))
        elif color is not None and (m := _TOTAL.match(line)) is not None:
            out[color] = int(m.group(1))
            color = None
    return out


def parse_buffer_assignment(text: str) -> list[XlaAllocation]:
    """Read the allocations of ``*-buffer-assignment.txt`` (the part before its statistics)."""
    out: list[XlaAllocation] = []
    for line in text.splitlines():
        if (m := _ALLOC.match(line)) is not None:
            flags = m.group(3).strip(", ")
            color = re.search(r"color (\d+)", flags)
            out.append(
                XlaAllocation(
                    int(m.group(1)), int(m.group(2)), int(color.group(1)) if color else 0, flags
                )
            )
        elif out and (m := _VALUE.match(line)) is not None:
            out[-1].values.append((m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)))
        elif out and line and not line.startswith((" ", "allocation")):
            break  # the statistics that follow the allocations
    return out


def hbm_oom_figures(message: str) -> tuple[int, int] | None:
    """``(required, available)`` bytes from XLA:TPU's ``CompileTimeHbmOom`` error text, which
    writes binary units as ``18.65G``; None for any other error."""
    m = _OOM.search(message)
    if m is None:
        return None
    need = float(m.group(1)) * _UNITS[m.group(2)]
    have = float(m.group(3)) * _UNITS[m.group(4)]
    return int(need), int(have)
