"""Row for the call-structure capture (issue 26): the trace with it against the trace without it.

``nbcompile``'s trace stage (``nbcompile.stages.run_stages``) runs ``jitted.trace(*args)``
inside :func:`nbcompile.capture.calls.record_calls`, which watches JAX stamp each equation and
records the user's calls. Its own switch, ``record_calls(enabled=False)``, yields an empty log
and installs no hook: that is the anchor. Both sides trace the same model through
``nbcompile.stages.make_jitted`` (a fresh function object each time, as ``nbcompile.compile``
does, so JAX's trace cache serves neither), in one process, alternating which side goes first;
one unmeasured trace of each side first warms the caches both share (``jnp`` functions' own
jits). Wall time and the tracing thread's CPU time (``time.thread_time``), which other work on a
shared machine does not inflate.

Both sides trace with Python's cyclic collector paused, as ``run_stages`` traces
(``nbcompile/_gc.py``): the row measures the trace stage as nbcompile runs it. The same pairs with
the collector on are an informative row of their own (a caller of ``record_calls`` that does not
pause it pays its collections as well: the recording's objects live as long as the trace's).
"""

from __future__ import annotations

import contextlib
import gc
import time
from typing import Any

from benchmarks._extra_models import build
from benchmarks._stats import Row, ratio_at_most

__all__ = ["capture_overhead"]


def _trace(
    fn: Any, args: tuple[Any, ...], capture: bool, timed: bool = False, paused: bool = True
) -> dict[str, Any]:
    from nbcompile import _gc
    from nbcompile.capture.calls import record_calls
    from nbcompile.stages import make_jitted

    jitted = make_jitted(fn)
    gc.collect()
    collector = _gc.paused() if paused else contextlib.nullcontext()
    t0, c0 = time.perf_counter(), time.thread_time()
    with collector, record_calls(enabled=capture, timed=timed) as log:
        traced = jitted.trace(*args)
    wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
    return {
        "wall": wall,
        "cpu": cpu,
        "calls": len(log.calls),
        "hook_s": log.seconds,
        "complete": log.complete,
        "eqns": len(traced.jaxpr.eqns),
    }


def _pairs(
    fn: Any, args: tuple[Any, ...], pairs: int, paused: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``pairs`` traces with the capture and without, alternating which goes first."""
    with_, without = [], []
    for i in range(pairs):
        order = (True, False) if i % 2 == 0 else (False, True)
        got = {side: _trace(fn, args, side, paused=paused) for side in order}
        with_.append(got[True])
        without.append(got[False])
    return with_, without


def capture_overhead(model: str, pairs: int, target: float | None) -> list[Row]:
    """Trace with the capture / trace without it, pair by pair: wall and thread CPU rows."""
    fn, args = build(model)
    _trace(fn, args, True)  # warm-up, unmeasured: both sides then meet the same warm caches
    _trace(fn, args, False)
    with_, without = _pairs(fn, args, pairs, paused=True)
    on_with, on_without = _pairs(fn, args, max(3, pairs // 2), paused=False)
    hooks = _trace(fn, args, True, timed=True)  # the hooks' own seconds (timing adds its cost)
    last = with_[-1]
    extra = {
        "calls_recorded": last["calls"],
        "capture_complete": all(r["complete"] for r in with_),
        "jaxpr_eqns_top_level": last["eqns"],
        "hook_seconds_one_timed_trace": round(hooks["hook_s"], 4),
        "timed_trace_wall_s": round(hooks["wall"], 4),
    }
    note = (
        f"{pairs} pairs in one process, same model, fresh jit per trace; record_calls() vs "
        f"record_calls(enabled=False) around jitted.trace(), the collector paused as "
        f"run_stages pauses it; {last['calls']} calls recorded"
    )
    anchor = "trace, capture off"
    rows = [
        Row(
            "call capture",
            model,
            "s",
            "trace with call capture",
            anchor,
            note=note,
            extra=extra,
            target=ratio_at_most(target),
        ),
        Row(
            "call capture CPU",
            model,
            "s",
            "trace with call capture",
            anchor,
            note=note + "; tracing thread's CPU time",
            target=ratio_at_most(target),
        ),
    ]
    rows.append(
        Row(
            "call capture, collector on",
            model,
            "s",
            "trace with call capture",
            anchor,
            note=f"informative: {len(on_with)} pairs as above with Python's cyclic collector on; "
            "tracing thread's CPU time",
        )
    )
    rows[0].set_pairs([r["wall"] for r in with_], [r["wall"] for r in without])
    rows[1].set_pairs([r["cpu"] for r in with_], [r["cpu"] for r in without])
    rows[2].set_pairs([r["cpu"] for r in on_with], [r["cpu"] for r in on_without])
    if not extra["capture_complete"] or not last["calls"]:
        for row in rows:
            row.note += "; WARNING: the capture recorded no calls or stopped part-way"
    return rows
