"""Rows for ``--profile``: its overhead against plain calls, and the CPU peak calibration.

* **--profile overhead**: the wall time of ``profile(c, calls=N)`` (one warm-up call, N calls
  under JAX's profiler, writing and reading the trace, attribution) against the budget
  ``1.5 × N plain calls + 1 s``, the plain calls timed right next to it (pairs alternate which
  side goes first). The analysis the profile reads (``c.fusions``) is computed before timing, as
  the magic has it ready for the view; the roofline peaks come from the per-machine cache.
* **calibration**: one fresh measurement of the CPU peaks (``refresh=True``, written to a
  temporary cache folder, never the user's), which must take at most 2 s.
"""

from __future__ import annotations

import os
import tempfile
import time

import jax

from benchmarks._extra_models import build
from benchmarks._stats import Row, Target, paired

__all__ = ["calibration", "profile_overhead"]


def profile_overhead(model: str, pairs: int, calls: int) -> Row:
    import nbcompile
    from nbcompile.measure import profile

    fn, args = build(model)
    c = nbcompile.compile(fn, *args)
    c.fusions  # noqa: B018 - the analysis is ready before the magic profiles
    profile(c, calls=1)  # peaks cached, profiler initialised: what a second --profile costs
    compiled = c.compiled
    coverage: list[float] = []

    def subject() -> float:
        t0 = time.perf_counter()
        p = profile(c, calls=calls)
        seconds = time.perf_counter() - t0
        coverage.append(p.coverage)
        return seconds

    def budget() -> float:
        t0 = time.perf_counter()
        for _ in range(calls):
            jax.block_until_ready(compiled(*args))
        return 1.5 * (time.perf_counter() - t0) + 1.0

    row = Row(
        "--profile overhead",
        model,
        "s",
        f"profile(c, calls={calls})",
        f"1.5 × {calls} plain calls + 1 s",
        target=Target("ratio", "<=", 1.0, "≤ 1.00 (within budget)"),
        note=f"{pairs} pairs; analysis ready, peaks cached",
    )
    subj, anch = paired(subject, budget, pairs)
    row.set_pairs(subj, anch)
    row.extra["coverage"] = coverage
    return row


def calibration(pairs: int) -> Row:
    from nbcompile.measure import _peaks

    row = Row(
        "calibration",
        "CPU peaks",
        "s",
        "cpu_peaks(refresh=True)",
        None,
        target=Target("subject", "<=", 2.0, "≤ 2 s once per machine"),
        note=f"{pairs} fresh measurements into a temporary cache",
    )
    seconds, peaks = [], []
    old = os.environ.get("NBCOMPILE_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="nbcompile-bench-peaks-") as tmp:
        os.environ["NBCOMPILE_CACHE_DIR"] = tmp
        try:
            for _ in range(pairs):
                t0 = time.perf_counter()
                p, _raw = _peaks.cpu_peaks(refresh=True)
                seconds.append(time.perf_counter() - t0)
                peaks.append((p.flops_per_s.value, p.bytes_per_s.value))
        finally:
            if old is None:
                os.environ.pop("NBCOMPILE_CACHE_DIR", None)
            else:
                os.environ["NBCOMPILE_CACHE_DIR"] = old
    row.set_pairs(seconds)
    row.extra["flops_per_s"] = [f for f, _ in peaks]
    row.extra["bytes_per_s"] = [b for _, b in peaks]
    return row
