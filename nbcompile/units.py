"""One way to write numbers for people: bytes, counts, seconds (mirrored by ``js/util.js``).

A leaf module (imports nothing from nbcompile), so every layer — analysis, frozen, report,
the CLI — formats figures the same way. ``None`` means "not reported" everywhere.
"""

from __future__ import annotations

__all__ = ["NOT_REPORTED", "format_bytes", "format_count", "format_seconds"]

NOT_REPORTED = "not reported"


def format_bytes(n: float | None) -> str:
    """``1.23 MB`` (decimal units, three significant digits); ``512 B`` below a kilobyte."""
    if n is None:
        return NOT_REPORTED
    value = float(n)
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} B"


def format_count(x: float | None) -> str:
    """``1.5M``, ``12.3k``, ``42``; non-integral small values keep three significant digits."""
    if x is None:
        return NOT_REPORTED
    value = float(x)
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.0f}" if value.is_integer() else f"{value:.3g}"


def format_seconds(seconds: float | None) -> str:
    """``1.23 s``, ``4.56 ms``, ``7.89 µs``, ``12 ns``."""
    if seconds is None:
        return NOT_REPORTED
    s = float(seconds)
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(s) >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.0f} ns"
