"""Bounds on what a long loop costs ``--profile``: the profiler's events, the report, the strip.

JAX's profiler records every kernel execution, and a loop runs its body's kernels once per
iteration: a 10^4-iteration ``lax.scan`` of six kernels, profiled 5 times, is 300,000 events,
and the profiler held about 2.8 KB per event (RSS of the process, XLA:CPU, jaxlib 0.12.0.1,
mostly inside ``stop_trace``: 276 -> 1,196 MB), so the default 20 calls of a 10^5-iteration
loop would need tens of GB. So:

* :func:`executions_per_call` counts, before profiling, the kernel executions of one call from
  the loops' trip counts (None where a loop around a kernel has no static trip count: then one
  call is profiled alone first, and counted);
* :func:`plan_calls` profiles fewer calls where the asked-for ones would exceed
  :data:`EVENT_BUDGET` executions, and a call over :data:`ONE_CALL_EVENTS` is refused with
  ``NBC620`` naming the loop;
* :func:`bars` folds a loop's iterations into at most :data:`MAX_BARS` bars for the report and
  the view (each bar: its iterations' mean, the slowest one, and its slowest kernels), and
  :func:`element_label` names ``layer[a:b]`` rows the same way, so the report's size does not
  grow with the trip count.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from ..errors import TargetError

__all__ = [
    "EVENT_BUDGET",
    "MAX_BARS",
    "ONE_CALL_EVENTS",
    "bars",
    "element_label",
    "executions_per_call",
    "plan_calls",
    "too_many_error",
]

#: kernel executions one profile records at most over all its calls (about 0.7 GB measured)
EVENT_BUDGET = 250_000
#: kernel executions of one call past which --profile refuses (about 1.4 GB measured)
ONE_CALL_EVENTS = 500_000
#: bars of a loop's strip at most (and ``layer[...]`` rows per loop): past it, iterations fold
MAX_BARS = 64
#: per-iteration numbers a loop carries into the report at most (``iterations``, ``by_kernel``)
MAX_NUMBERS = 4_096
#: kernels named per bar in the report (the hover shows these)
_KERNELS_PER_BAR = 4


def executions_per_call(loops: list[Any], kernels: Iterable[str]) -> tuple[int | None, Any]:
    """(kernel executions one call runs, the outermost loop that runs most of them): every
    kernel once, times the trip count of each loop it runs in (a kernel in a branch counted as
    if it ran in every iteration: a bound). (None, that loop) where a loop that runs kernels has
    no static trip count. A loop XLA unrolled, or compiled into one kernel, adds nothing."""
    times = dict.fromkeys(kernels, 1)
    unknown = None
    for loop in loops:
        if not loop.whiles or loop.one_kernel is not None:
            continue
        if loop.trip_count is None:
            if loop.body_kernels and unknown is None:
                unknown = loop
            continue
        for k in loop.body_kernels:
            if k in times:
                times[k] *= loop.trip_count
    if unknown is not None:
        return None, unknown
    heaviest, most = None, 0
    for loop in loops:
        if loop.parent is None and loop.whiles and loop.one_kernel is None:
            inside = sum(times.get(k, 0) for k in loop.body_kernels)
            if inside > most:
                heaviest, most = loop, inside
    return sum(times.values()), heaviest


def plan_calls(asked: int, per_call: int, loop: Any, counted: bool) -> tuple[int, str | None]:
    """(calls to profile, a note where fewer than ``asked``): as many as fit in
    :data:`EVENT_BUDGET` executions, at least one; ``NBC620`` where one call runs more than
    :data:`ONE_CALL_EVENTS` (``loop``: the loop that runs most of them)."""
    if per_call > ONE_CALL_EVENTS:
        raise too_many_error(per_call, loop, counted)
    calls = max(1, min(asked, EVENT_BUDGET // max(per_call, 1)))
    if calls == asked:
        return calls, None
    return calls, (
        f"{calls} of the {asked} calls asked for were profiled: one call runs about "
        f"{per_call:,} kernel executions"
        + (f" ({loop.label})" if loop is not None else "")
        + ", and JAX's profiler keeps every one in memory (about 2.8 KB each, measured); "
        f"a profile records at most {EVENT_BUDGET:,}"
    )


def too_many_error(per_call: int, loop: Any, counted: bool) -> TargetError:
    """``NBC620``: one call runs more kernel executions than a profile holds."""
    how = "counted in one profiled call" if counted else "from the loops' trip counts"
    where = ""
    if loop is not None:
        trips = f"{loop.trip_count:,}" if loop.trip_count is not None else "a data-dependent"
        where = (
            f": {loop.label} runs {len(loop.body_kernels)} kernel(s) in each of its {trips} "
            "iterations"
        )
    return TargetError(
        f"cannot profile: one call runs about {per_call:,} kernel executions ({how}){where}; "
        "JAX's profiler keeps every one in memory (about 2.8 KB each, measured), and one "
        f"profile holds at most {ONE_CALL_EVENTS:,}",
        code="NBC620",
        line=getattr(loop, "line", None),
        hint="profile the loop with fewer iterations (every iteration runs the same kernels: "
        "e.g. length=1000 or a shorter fori_loop), or time whole calls with --bench",
    )


def _ranges(n: int) -> list[tuple[int, int]]:
    """``[first, last]`` of each bar: one per iteration up to :data:`MAX_BARS`, else equal
    runs of ``ceil(n / MAX_BARS)`` iterations."""
    width = max(1, math.ceil(n / MAX_BARS))
    return [(a, min(a + width, n) - 1) for a in range(0, n, width)]


def bars(iterations: list[float], by_kernel: dict[str, list[float]]) -> list[dict[str, Any]]:
    """The strip's bars: per run of iterations (one each up to :data:`MAX_BARS`) its
    ``first`` / ``last`` iteration, ``seconds`` (their mean), ``slowest`` and
    ``slowest_iteration`` (the bar is drawn as tall as the slowest, so one slow iteration
    shows), and ``kernels``: its slowest kernels ``[name, mean seconds]`` (``more``: how many
    other kernels ran in it)."""
    out = []
    for a, b in _ranges(len(iterations)):
        part = iterations[a : b + 1]
        slow = max(range(a, b + 1), key=iterations.__getitem__)
        width = b - a + 1
        kernels = [(k, sum(v[a : b + 1]) / width) for k, v in by_kernel.items()]
        ran = sorted((kv for kv in kernels if kv[1] > 0), key=lambda kv: -kv[1])
        out.append(
            {
                "first": a,
                "last": b,
                "seconds": sum(part) / width,
                "slowest": iterations[slow],
                "slowest_iteration": slow,
                "kernels": [[k, s] for k, s in ran[:_KERNELS_PER_BAR]],
                "more": max(0, len(ran) - _KERNELS_PER_BAR),
            }
        )
    return out


def element_label(k: int, n: int) -> str:
    """The index of element ``k`` of ``n`` in a scan's ``layer[...]`` rows: ``[k]`` up to
    :data:`MAX_BARS` elements, else the run of elements it is in, as Python slices it
    (``[64:128]``: elements 64 to 127), so a loop gives at most :data:`MAX_BARS` rows."""
    if n <= MAX_BARS:
        return f"[{k}]"
    width = math.ceil(n / MAX_BARS)
    a = (k // width) * width
    return f"[{a}:{min(a + width, n)}]"
