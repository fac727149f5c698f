"""Loops in the static picture: the port of ``loopLeafLines`` in ``js/loops.js``.

A collapsed loop group with measured iterations reserves one blank line on its box for the
per-iteration strip, so the static picture's boxes keep the widget's sizes (the strip itself is
drawn by the widget)."""

from __future__ import annotations

from typing import Any

__all__ = ["loop_leaf_lines"]


def _measured(pg: Any) -> set[str]:
    """Group ids of the loops of ``pg``'s program that the profile measured per iteration."""
    report = pg.report or {}
    gradient = pg.graph is (report.get("graphs") or {}).get("gradient")
    loops = (report.get("gradient_loops") if gradient else report.get("loops")) or []
    times = [] if gradient else ((report.get("extras") or {}).get("profile") or {}).get("loops")
    measured = {t.get("loop") for t in times or () if t.get("bars")}
    out = set()
    for loop in loops:
        if loop.get("index") not in measured:
            continue
        gid = (
            (loop.get("compiled_groups") or [None])[0] if pg.is_compiled else loop.get("body_group")
        )
        if gid is not None:
            out.add(gid)
    return out


def loop_leaf_lines(pg: Any, group: Any) -> list[str]:
    """``[""]`` for a loop group with measured iterations (its strip's line), else ``[]``.
    (A program has a handful of loops: worked out per call.)"""
    return [""] if group.id in _measured(pg) else []
