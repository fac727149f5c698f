"""Inside the loop: seconds per iteration of every loop of a profiled program.

XLA runs a loop's body once per iteration, and the profiler records each of its kernels every
time it runs (XLA:CPU, JAX 0.10.2 and 0.12: a 6-iteration ``lax.scan`` profiled twice gives 12
events of every kernel of its body; a ``lax.cond`` branch's kernels only for the iterations that
took it; the ``while`` itself is one event around them all). Iterations are told apart by the
body's own kernels (``Loop.every_iteration``: each runs once in every iteration, never in a
branch): iteration i runs from the earliest i-th execution of any of them to the next
iteration's start (the last one to the end of the ``while``'s event). Iterations run one after
another, so no kernel of iteration i+1 starts before iteration i is done.

Per iteration: its wall-clock time and each body kernel's share of it (instants shared by
kernels running side by side are split evenly, as for the whole call: ``_timeline.attribute``),
the mean over the runs of the loop (the profiled calls; an inner loop's every run in every
call). Means, not the medians the rest of the profile takes: means add up, so a loop's
iterations add up to its measured total (up to the time before its first iteration starts)
however much the calls vary on a busy machine; medians of each iteration did not (seen: 14 %
short on a busy 2-core machine). A loop XLA unrolled has no iterations left to see: its total
is the time of the kernels it became, and a note says so.
"""

from __future__ import annotations

import collections
import re
from dataclasses import dataclass, field
from typing import Any

from ..analysis.calls import BACKWARD
from ._loop_bounds import MAX_NUMBERS, bars, element_label
from ._result import median
from ._timeline import Span, attribute

__all__ = ["LoopTime", "layer_rows", "loop_times"]

#: seconds per body kernel below which the profiler's own per-event cost (0.5-1 µs per kernel
#: execution on XLA:CPU, jaxlib 0.10.2 and 0.12, 2-core x86: docs/profile.md) shows in a loop
_SHORT = 5e-6


@dataclass
class LoopTime:
    """One loop of the profile. ``iterations``: seconds per iteration in the order they ran
    (a reverse scan's first iteration is its last element), the mean over the loop's runs;
    ``by_kernel``: {kernel: seconds in each iteration}; ``total_seconds``: the loop's measured
    time per call (its ``while`` event, or its kernels where no loop is left); ``runs``: how
    many times one call runs it (an inner loop: once per outer iteration)."""

    loop: Any
    iterations: list[float] = field(default_factory=list)
    by_kernel: dict[str, list[float]] = field(default_factory=dict)
    total_seconds: float | None = None
    runs: float = 0.0
    source: str = "measured"
    note: str | None = None

    @property
    def iteration_seconds(self) -> float:
        """The iterations added up (one run of the loop)."""
        return sum(self.iterations)

    def to_json(self) -> dict[str, Any]:
        """The report's record: ``bars`` (at most ``MAX_BARS``, what the strip draws) always;
        ``iterations`` / ``by_kernel`` in full only up to ``MAX_NUMBERS`` numbers, else null
        with ``folded`` saying so (this object keeps every figure)."""
        n = len(self.iterations)
        fits = n <= MAX_NUMBERS
        kernels_fit = n * len(self.by_kernel) <= MAX_NUMBERS
        left = [] if fits else ["iterations"]
        left += [] if kernels_fit else ["by_kernel"]
        return {
            "loop": self.loop.index,
            "label": self.loop.label,
            "iteration_count": n,
            "iterations": list(self.iterations) if fits else None,
            "by_kernel": ({k: list(v) for k, v in self.by_kernel.items()} if kernels_fit else None),
            "bars": bars(self.iterations, self.by_kernel),
            "folded": (
                f"{' and '.join(left)} of {n:,} iterations left out of the report (over "
                f"{MAX_NUMBERS:,} numbers): bars hold their means, slowest iterations and "
                "kernels; c.profile.loops has every figure"
                if left
                else None
            ),
            "total_seconds": self.total_seconds,
            "runs": self.runs,
            "note": self.note,
            "from": self.source,
        }


def loop_times(loops: list[Any], calls: list[list[Span]], containers: frozenset[str]) -> list:
    """A :class:`LoopTime` per loop, from each profiled call's kernel spans (clipped to the
    call). Each call's spans are grouped by kernel once: a loop reads only its own kernels'
    (a program of hundreds of loops would otherwise read every span once per loop)."""
    named = [_by_name(spans) for spans in calls]
    return [_one(loop, named, containers) for loop in loops]


def _by_name(spans: list[Span]) -> dict[str, list[Span]]:
    out: dict[str, list[Span]] = {}
    for s in spans:
        if s.name not in out:
            out[s.name] = []
        out[s.name].append(s)
    return out


def _of(named: dict[str, list[Span]], names: Any) -> list[Span]:
    return [s for n in names for s in named.get(n, ())]


def _one(loop: Any, calls: list[dict[str, list[Span]]], containers: frozenset[str]) -> LoopTime:
    ns = 1e-9
    body = set(loop.body_kernels)
    marks = set(loop.every_iteration) - containers
    whiles = set(loop.whiles)
    runs: list[tuple[list[float], dict[str, list[float]]]] = []
    totals: list[float] = []
    body_seen = False
    for named in calls:
        inside = sorted(_of(named, body), key=lambda s: s.start)
        if not loop.whiles:  # XLA left no loop: its kernels' time is its time
            totals.append(sum(s.duration for s in inside if s.name not in containers) * ns)
            continue
        if loop.one_kernel is not None:  # the loop runs inside one kernel: its time is its
            totals.append(sum(s.duration for s in named.get(loop.one_kernel, ())) * ns)
            continue
        total = 0
        for start, end, mine in _runs(_of(named, whiles), inside):
            body_seen = body_seen or bool(mine)
            total += end - start
            split = _iterations(mine, marks, end, loop.trip_count)
            if split is not None:
                runs.append(_measure(mine, split, containers))
        totals.append(total * ns)
    out = LoopTime(loop, runs=0.0)
    out.total_seconds = _mean(totals) if totals else None
    if not loop.whiles:
        out.note = (
            "no per-iteration events: no loop is left of it in XLA's program "
            f"({'; '.join(loop.changes) or 'unrolled'}); total is the time of its kernels"
        )
        return out
    if loop.one_kernel is not None:
        out.note = (
            f"no per-iteration events: XLA:CPU compiled this loop into one kernel "
            f"({loop.one_kernel}, a small call); total is that kernel's time"
        )
        return out
    if not runs:
        out.note = (
            "no iteration ran in the profiled calls (its trip count depends on the data); "
            "total is the loop's own event"
            if not body_seen and loop.trip_count is None
            else "no per-iteration events: the profiler recorded no kernel that runs once in "
            "every iteration of this loop; total is the loop's own event"
        )
        return out
    out.runs = len(runs) / len(calls) if calls else 0.0
    length = collections.Counter(len(r[0]) for r in runs).most_common(1)[0][0]
    same = [r for r in runs if len(r[0]) == length]
    out.iterations = [_mean(r[0][i] for r in same) * ns for i in range(length)]
    names = sorted({k for r in same for k in r[1]})
    zero = [0.0] * length
    out.by_kernel = {
        k: [_mean(r[1].get(k, zero)[i] for r in same) * ns for i in range(length)] for k in names
    }
    if len(same) < len(runs):
        out.note = f"{len(runs) - len(same)} run(s) of it had another number of iterations"
    per_kernel = median(out.iterations) / max(len(marks), 1)
    if per_kernel < _SHORT:
        short = (
            f"short iterations ({len(marks)} kernel(s) each, {per_kernel * 1e6:.1f} µs per "
            "kernel): the profiler's own cost per kernel execution (0.5-1 µs measured on XLA:CPU)"
            " is a large part of them; time them without the profiler with --bench"
        )
        out.note = f"{out.note}; {short}" if out.note else short
    if loop.unroll > 1:
        extra = f"each measured iteration is one of XLA's: {loop.unroll} copies of the body"
        out.note = f"{out.note}; {extra}" if out.note else extra
    return out


def _runs(loop_events: list[Span], inside: list[Span]) -> list[tuple[int, int, list[Span]]]:
    """(start, end, body spans) of each run of the loop in one call. A run starts with its
    ``while`` event and holds the body's kernels until the next run starts: the event itself
    may end early (seen on XLA:CPU with JAX 0.12: a body with an asynchronous dot goes on in
    the thread pool after the ``while`` event's thread returned), so a run ends at the later
    of its event's end and its last kernel's. Without events of the loop itself (a device
    plane shows kernels only) the call's body kernels are one run."""
    events = sorted((s.start, s.end) for s in loop_events)
    if not events:
        return [(inside[0].start, max(s.end for s in inside), inside)] if inside else []
    out = []
    k = 0
    for i, (start, end) in enumerate(events):
        nxt = events[i + 1][0] if i + 1 < len(events) else None
        while k < len(inside) and inside[k].start < start:
            k += 1
        mine = []
        while k < len(inside) and (nxt is None or inside[k].start < nxt):
            mine.append(inside[k])
            k += 1
        last = max((s.end for s in mine), default=end)
        out.append((start, max(end, last), mine))
    return out


def _mean(values: Any) -> float:
    vals = list(values)
    return sum(vals) / len(vals) if vals else 0.0


def _iterations(
    spans: list[Span], marks: set[str], end: int, trips: int | None
) -> list[int] | None:
    """Iteration boundaries (ns) within one run of the loop, the run's end last; None where
    its own kernels do not show the iterations."""
    seen: dict[str, list[int]] = collections.defaultdict(list)
    for s in spans:
        if s.name in marks:
            seen[s.name].append(s.start)
    if not seen:
        return None
    counts = collections.Counter(len(v) for v in seen.values())
    n = trips if trips is not None and trips in counts else counts.most_common(1)[0][0]
    every = [v for v in seen.values() if len(v) == n]
    if n < 1 or not every:
        return None
    bounds = [min(v[i] for v in every) for i in range(n)]
    return [*bounds, max(end, bounds[-1])]


def _measure(
    spans: list[Span], bounds: list[int], containers: frozenset[str]
) -> tuple[list[float], dict[str, list[float]]]:
    """(ns per iteration, {kernel: ns per iteration}) of one run.

    One sweep over the spans (sorted by start, as ``_one`` gives them): iteration i sees the
    spans started before its end that are still running after its start, so the work is the
    spans plus the iterations, not their product (a 10^5-iteration loop has ~10^6 spans)."""
    n = len(bounds) - 1
    times = [float(bounds[i + 1] - bounds[i]) for i in range(n)]
    per: dict[str, list[float]] = {}
    ordered = spans if _sorted(spans) else sorted(spans, key=lambda s: s.start)
    active: list[Span] = []
    k = 0
    for i in range(n):
        lo, hi = bounds[i], bounds[i + 1]
        while k < len(ordered) and ordered[k].start < hi:
            active.append(ordered[k])
            k += 1
        active = [s for s in active if s.end > lo]
        clipped = [Span(s.name, max(s.start, lo), min(s.end, hi), s.thread) for s in active]
        for name, value in attribute(clipped, containers).items():
            if name in containers:
                continue
            if name not in per:  # not setdefault: its default, n floats, is made every time
                per[name] = [0.0] * n
            per[name][i] += value
    return times, per


def _sorted(spans: list[Span]) -> bool:
    return all(spans[i].start <= spans[i + 1].start for i in range(len(spans) - 1))


_LABEL_NUMBER = re.compile(r"#\d+")


def layer_rows(
    times: list[LoopTime], seconds: dict[str, float], functions: dict[str, list[str]], kinds: Any
) -> tuple[dict[str, float], set[str]]:
    """``by_function`` rows ``layer[k]`` (element k of a scan's inputs; ``layer[a:b]``, elements a
    to b - 1, past ``MAX_BARS`` elements: at most that many rows a loop) for the outermost loops
    measured per iteration whose body calls the user's functions, and the kernels they cover.

    Each body kernel's profile time (``seconds``: its median per call) is split over the
    iterations in proportion to its measured time in each, then over its call paths; a path
    is named by the first of the user's functions the body calls (``body#1/layer#1/tanh`` ->
    ``layer``; the scan's own body function where it calls none) with the element index, and
    ``(backward)`` for a backward loop. A reverse scan's iteration k is element n-1-k."""
    rows: dict[str, float] = {}
    covered: set[str] = set()
    for t in times:
        loop = t.loop
        if loop.parent is not None or not t.iterations or not t.by_kernel:
            continue
        paths = {k: functions.get(k, []) for k in t.by_kernel}
        head = _body_function(loop, paths, kinds)
        n = len(t.iterations)
        for kernel, per in t.by_kernel.items():
            total = sum(per)
            if total <= 0 or not paths[kernel] or kernel not in seconds:
                continue
            names = [_row(loop, p, head, kinds) for p in paths[kernel]]
            names = [x for x in names if x is not None]
            if not names:
                continue
            covered.add(kernel)
            for i, value in enumerate(per):
                if value <= 0:  # a branch not taken in this iteration
                    continue
                k = n - 1 - i if loop.reverse else i
                part = seconds[kernel] * value / total / len(names)
                for name in names:
                    key = name.replace("[k]", element_label(k, n))
                    rows[key] = rows.get(key, 0.0) + part
    return rows, covered


def _user_labels(loop: Any, path: str, kinds: Any) -> list[str]:
    """The user's functions (not library calls) on a body kernel's call path, inside the
    loop's own call group."""
    labels = path.split("/")
    outer = loop.group.split("/") if loop.group else []
    if labels[: len(outer)] == outer:
        labels = labels[len(outer) :]
    return [x for x in labels if kinds.get(x.removesuffix(BACKWARD)) == "call"]


def _body_function(loop: Any, paths: dict[str, list[str]], kinds: Any) -> str | None:
    """The scan's body function (its first user function where every body kernel has the
    same), else None."""
    firsts = {
        (_user_labels(loop, p, kinds) or [""])[0].removesuffix(BACKWARD)
        for ps in paths.values()
        for p in ps
    }
    return firsts.pop() or None if len(firsts) == 1 else None


def _row(loop: Any, path: str, head: str | None, kinds: Any) -> str | None:
    labels = _user_labels(loop, path, kinds)
    if not labels:
        return None
    if head is not None and labels[0].removesuffix(BACKWARD) == head and len(labels) > 1:
        labels = labels[1:]
    label = labels[0]
    backward = label.endswith(BACKWARD)
    name = _LABEL_NUMBER.sub("", label.removesuffix(BACKWARD)) + "[k]"
    name += BACKWARD if backward else ""
    return f"{loop.group}/{name}" if loop.group else name
