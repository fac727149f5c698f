"""A user function called thousands of times while tracing (issue 41 item 2): time and peak memory.

The model: ``cheap(x, i) = x * i + 1`` called ``n`` times from a list comprehension, the results
summed pairwise (so the chain of dependent operations stays log2(n) deep: XLA's compiler
overflows its stack on a linear chain of 10^5, NBC216). One side runs ``nbcompile.compile`` and
reads ``c.analysis`` (the capture records up to ``MAX_CALLS`` calls, each a group; the picture
folds repeated calls); the other ``jax.jit(f).lower(x).compile()``. Each side in a fresh process
(JAX's persistent cache off: both compile for real), alternating which goes first; the figures
are the wall time to the end (compile + analysis against compile) and the process's peak
resident set (Linux's ``VmHWM``, which includes the interpreter and JAX: about 170 MB on both
sides; not ``ru_maxrss``, which a child inherits from its parent's peak across fork and exec:
in the full benchmark run both sides read the harness's 4.7 GB).
Run as ``python -m benchmarks._many_calls SIDE N`` in the child.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._stats import Row, ratio_at_most
from benchmarks._subprocs import run_module

ROOT = Path(__file__).resolve().parent.parent


def cheap(x: Any, i: int) -> Any:
    return x * float(i) + 1.0


def many_calls(n: int) -> Any:
    def many(x: Any) -> Any:
        parts = [cheap(x, i) for i in range(n)]
        while len(parts) > 1:  # pairwise: the chain of dependent operations stays short
            parts = [a + b for a, b in zip(parts[::2], parts[1::2], strict=False)] + parts[
                len(parts) & ~1 :
            ]
        return parts[0]

    return many


def child(side: str, n: int) -> dict[str, Any]:
    """In a fresh process: compile (and analyse) the model once; wall seconds, peak RSS (MB)."""
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_compilation_cache", False)
    x = jnp.float32(0.5)
    fn = many_calls(n)
    t0 = time.perf_counter()
    out: dict[str, Any] = {}
    if side == "jit":
        jax.jit(fn).lower(x).compile()
    else:
        import nbcompile

        c = nbcompile.compile(fn, x)
        c.analysis  # noqa: B018 - computed now, as the view would
        out["calls_recorded"] = len(c.stages.calls.calls) if c.stages.calls else 0
        out["calls_capped"] = c.stages.calls.capped if c.stages.calls else 0
    out["wall"] = time.perf_counter() - t0
    out["maxrss_mb"] = peak_rss_mb()
    return out


def peak_rss_mb() -> float:
    """This process's peak resident set in MB: ``VmHWM`` where Linux gives it (kept by the
    process's own memory map, so new at exec), else ``ru_maxrss``."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _run_side(side: str, n: int) -> dict[str, Any]:
    return run_module("benchmarks._many_calls", side, str(n))


def many_calls_rows(n: int, pairs: int, time_target: float | None, memory_target: float | None):
    """Time and peak memory, nbcompile.compile + analysis vs jax.jit's compile, ``pairs`` pairs
    of fresh processes."""
    model = f"{n:,} calls of one function"
    note = (
        f"{pairs} pairs of fresh processes, persistent cache off; nbcompile.compile + "
        "c.analysis vs jax.jit(f).lower(x).compile()"
    )
    rows = [
        Row(
            "many calls",
            model,
            "s",
            "compile + analysis",
            "jax.jit compile",
            target=ratio_at_most(time_target),
            note=note + "; wall time",
        ),
        Row(
            "many calls peak RSS",
            model,
            "bytes",
            "compile + analysis",
            "jax.jit compile",
            target=ratio_at_most(memory_target),
            note=note + "; peak resident set (VmHWM), interpreter and JAX included",
        ),
    ]
    subject: list[dict[str, Any]] = []
    anchor: list[dict[str, Any]] = []
    try:
        for i in range(pairs):
            sides = [(subject, "nbcompile"), (anchor, "jit")]
            for out, side in sides if i % 2 == 0 else sides[::-1]:
                out.append(_run_side(side, n))
    except (RuntimeError, subprocess.TimeoutExpired, ValueError) as exc:
        for row in rows:
            row.note = f"failed: {exc}"[:300]
        return rows
    rows[0].set_pairs([s["wall"] for s in subject], [a["wall"] for a in anchor])
    rows[1].set_pairs(
        [s["maxrss_mb"] * 2**20 for s in subject], [a["maxrss_mb"] * 2**20 for a in anchor]
    )
    rows[0].extra = {
        "calls_recorded": subject[-1].get("calls_recorded"),
        "calls_capped": subject[-1].get("calls_capped"),
    }
    return rows


if __name__ == "__main__":
    print(json.dumps(child(sys.argv[1], int(sys.argv[2]))))
