"""The user's calls in the memory map: ``by_function`` and module paths without call labels.

The memory map is built from HLO alone; the analysis of the same program knows which kernel
came from which of the user's calls (``Analysis.kernel_functions``) and how its cost divides
among them (``Analysis.kernel_shares``, see ``analysis/shares.py``). A buffer live at the peak
counts for the call paths of the kernel that made it, shared by those ops' cost (evenly where
the analysis has no shares).
"""

from __future__ import annotations

from typing import Any

from ..analysis.calls import strip_calls

__all__ = ["attach_functions"]


def attach_functions(m: Any, prog: Any) -> Any:
    """Set ``m.by_function`` ({call path: bytes at the peak}) from ``prog``'s analysis and keep
    call labels out of its buffers' module paths. Returns ``m``."""
    m.by_function = {}
    try:
        analysis = prog.analysis
    except Exception:  # no analysis for this program: the map stands without calls
        return m
    kinds = getattr(analysis, "call_kinds", None)
    if not kinds:
        return m
    for b in m.at_peak:
        if b.module:
            b.module = (strip_calls([b.module], kinds) or [None])[0]
    functions = getattr(analysis, "kernel_functions", {})
    shares = getattr(analysis, "kernel_shares", {})
    out: dict[str, float] = {}
    for b in m.at_peak:
        paths = functions.get(b.instruction, [])
        weights = getattr(shares.get(b.instruction), "functions", None) or {}
        covered = sum(weights.get(p, 0.0) for p in paths)
        for path in paths:
            part = weights.get(path, 0.0) / covered if covered > 0 else 1.0 / len(paths)
            out[path] = out.get(path, 0.0) + b.bytes * part
    m.by_function = {k: round(v) for k, v in sorted(out.items(), key=lambda kv: -kv[1])}
    return m
