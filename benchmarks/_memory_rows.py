"""Row for ``--memory``: a compile with the memory map against the same compile without it.

Subject: ``nbcompile.compile`` + every analysis + ``c.memory_map`` + the report (which then
carries the map), as ``%%compile --memory`` does before it shows the view. Anchor: the same
without the map (``%%compile``). Fresh model per repetition, so every side does a real XLA compile; pairs
alternate which side goes first (``benchmarks._stats.paired``). Target: ratio <= 1.5.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from benchmarks._extra_models import build
from benchmarks._stats import Row, cold, paired, ratio_at_most

__all__ = ["memory_overhead"]


def memory_overhead(model: str, pairs: int, target: float | None) -> Row:
    import nbcompile

    map_seconds: list[float] = []

    def compile_once(with_memory: bool) -> float:
        fn, args = build(model)
        cold()  # a first compile: no analysis of an identical earlier repetition to reuse
        gc.collect()
        t0 = time.perf_counter()
        c = nbcompile.compile(fn, *args)
        c.analysis  # noqa: B018 - every analysis, as the magic computes them for the view
        if with_memory:
            t1 = time.perf_counter()
            m: Any = c.memory_map
            map_seconds.append(time.perf_counter() - t1)
            assert m.peak_bytes > 0
        c.report()
        return time.perf_counter() - t0

    row = Row(
        "--memory overhead",
        model,
        "s",
        "compile+analysis+memory_map+report",
        "compile+analysis+report",
        target=ratio_at_most(target),
        note=f"{pairs} pairs, fresh model per repetition",
    )
    subj, anch = paired(lambda: compile_once(True), lambda: compile_once(False), pairs)
    row.set_pairs(subj, anch)
    row.extra["memory_map_seconds"] = map_seconds
    return row
