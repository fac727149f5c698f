"""Figures at real scale: a picoGPT-style GPT-2 train step (12 and 24 layers, d=768, a Python
loop over 12 heads: ~4,500 and ~9,000 kernels).

Per repetition, with a fresh model on each side (no trace, lowering or executable cache can
serve either; JAX's persistent cache is off in the harness) and alternating which side goes
first:

* anchor: bare ``jax.jit(f).lower(*a).compile()``;
* subject: ``nbcompile.compile(f, *a)`` -> the time it returns is *time to a usable function*
  (the analysis is computed on first use), then ``c.analysis`` and ``c.report()`` -> *compile +
  analysis*.

Rows per model (ratios to the anchor, pair by pair): in wall time, and in the process's CPU
time (all threads), which other work on a shared machine does not inflate; the analysis's own
stage times and the program's size are in the first row's ``extra``.
"""

from __future__ import annotations

import gc
import time
from typing import Any

import jax

from benchmarks._extra_models import build
from benchmarks._inprocess import XlaCompileCounter
from benchmarks._stats import Row, cold, ratio_at_most

__all__ = ["scale_rows"]


def _bare(model: str) -> tuple[float, float]:
    fn, args = build(model)
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    jax.jit(fn).lower(*args).compile()
    return time.perf_counter() - t0, time.process_time() - c0


def _ours(model: str, keep: dict[str, Any]) -> tuple[float, float, float, float]:
    """(usable wall, usable CPU, total wall, total CPU) seconds."""
    import nbcompile

    fn, args = build(model)
    cold()  # a first compile: no analysis of an identical earlier repetition to reuse
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    c = nbcompile.compile(fn, *args)
    usable, usable_cpu = time.perf_counter() - t0, time.process_time() - c0
    # the pre-optimisation HLO converted beside XLA's compile is analysis work done early
    # (low priority, in a thread): its CPU time counts in compile+analysis, not here
    early = c.stages.early_hlo
    usable_cpu -= early.cpu_seconds if early is not None else 0.0
    c.analysis  # noqa: B018 - the whole analysis is the point
    c.report()
    total, total_cpu = time.perf_counter() - t0, time.process_time() - c0
    keep["last"] = c
    return usable, usable_cpu, total, total_cpu


def scale_rows(
    model: str, pairs: int, total_target: float | None, usable_target: float | None
) -> list[Row]:
    """compile + analysis + report vs bare compile, and nbcompile.compile returning vs bare
    compile: in wall time, then in the process's CPU time (all threads: XLA's too), which other
    work on a shared machine does not inflate."""
    counter = XlaCompileCounter.get()
    series: dict[str, list[float]] = {
        k: [] for k in ("bare", "bare_cpu", "usable", "usable_cpu", "total", "total_cpu")
    }
    compiles: list[int] = []
    keep: dict[str, Any] = {}
    for i in range(pairs):
        before = counter.count
        if i % 2 == 0:
            ours = _ours(model, keep)
            bare = _bare(model)
        else:
            bare = _bare(model)
            ours = _ours(model, keep)
        for key, value in zip(series, (*bare, *ours), strict=True):
            series[key].append(value)
        compiles.append(counter.count - before)
    c = keep["last"]
    analysis = c.analysis
    extra = {
        "kernels": analysis.counts.get("kernels"),
        "jaxpr_eqns": analysis.counts.get("jaxpr_eqns"),
        "hlo_ops_after": analysis.counts.get("hlo_ops_after"),
        "analysis_stages_s": {k: round(v, 4) for k, v in analysis.timings.items()},
        "xla_compiles_per_pair": compiles,
    }
    note = f"{pairs} pairs, fresh model per repetition; {extra['kernels']} kernels"
    cpu_note = note + "; process CPU time (all threads)"
    usable_cpu_note = cpu_note + ", less the pre-optimisation HLO converted early (analysis)"
    anchor = "jit.lower().compile()"
    rows = [
        Row(
            "compile+analysis",
            model,
            "s",
            "nbcompile.compile+analysis+report",
            anchor,
            note=note,
            extra=dict(extra),
            target=ratio_at_most(total_target),
        ),
        Row(
            "usable function",
            model,
            "s",
            "nbcompile.compile returns",
            anchor,
            note=note,
            target=ratio_at_most(usable_target),
        ),
        Row(
            "compile+analysis CPU",
            model,
            "s",
            "nbcompile.compile+analysis+report",
            anchor,
            note=cpu_note,
            target=ratio_at_most(total_target),
        ),
        Row(
            "usable function CPU",
            model,
            "s",
            "nbcompile.compile returns",
            anchor,
            note=usable_cpu_note,
            target=ratio_at_most(usable_target),
        ),
    ]
    rows[0].set_pairs(series["total"], series["bare"])
    rows[1].set_pairs(series["usable"], series["bare"])
    rows[2].set_pairs(series["total_cpu"], series["bare_cpu"])
    rows[3].set_pairs(series["usable_cpu"], series["bare_cpu"])
    if any(n < 2 for n in compiles):
        for row in rows:
            row.note += "; WARNING: a pair did fewer than two XLA compiles (a cache served it)"
    from benchmarks import _display

    _display._COMPILED[model] = c  # displayed bytes and first paint reuse this compile
    return rows
