"""Interval arithmetic on one call's kernel spans: busy time and a fair split of overlaps.

Kernels of one call can overlap in time: XLA:CPU's thunk executor runs independent kernels on
several threads, an asynchronous kernel (a dot handed to the Eigen pool) stays open until its
completion marker while others run, and a loop (``while``) encloses its body's kernels. To say
where the wall-clock time went, each instant of the call is given to the kernels running then:

* a container (``while`` / ``conditional`` / ``call``) gets an instant only when none of the
  kernels it encloses is running (what is left is the loop's own overhead);
* otherwise the instant is split evenly between the kernels running (two kernels side by side on
  two cores get half each).

So the attributed times add up to the union of the kernel spans: no instant is counted twice and
none is invented. Times are integer nanoseconds as the profiler gives them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Span", "attribute", "union_ns"]


@dataclass(frozen=True, slots=True)
class Span:
    """One execution of a kernel: HLO instruction ``name`` from ``start`` to ``end`` (ns)."""

    name: str
    start: int
    end: int
    thread: str = ""

    @property
    def duration(self) -> int:
        return max(self.end - self.start, 0)


def union_ns(intervals: Iterable[tuple[int, int]]) -> int:
    """Total length of the union of ``(start, end)`` intervals."""
    total = 0
    cur_start = cur_end = None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        elif end > cur_end:
            cur_end = end
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def attribute(spans: list[Span], containers: frozenset[str] = frozenset()) -> dict[str, float]:
    """Nanoseconds of wall-clock time attributed to each kernel name (see module docstring).

    ``containers`` are the names of control-flow kernels: they yield to any other kernel running
    at the same instant. The values add up to ``union_ns`` of all spans.
    """
    points: list[tuple[int, int, int]] = []  # (time, +1 start / -1 end, span index)
    for i, span in enumerate(spans):
        if span.end > span.start:
            points.append((span.start, 1, i))
            points.append((span.end, -1, i))
    # ends before starts at the same instant: back-to-back kernels do not overlap
    points.sort(key=lambda p: (p[0], p[1]))
    out: dict[str, float] = {s.name: 0.0 for s in spans}
    active_work: dict[int, int] = {}  # span index -> 1 for non-container spans running
    active_cont: dict[int, int] = {}
    last = None
    for time, kind, i in points:
        if last is not None and time > last:
            width = time - last
            running = active_work or active_cont
            if running:
                share = width / len(running)
                for j in running:
                    out[spans[j].name] += share
        last = time
        target = active_cont if spans[i].name in containers else active_work
        if kind > 0:
            target[i] = 1
        else:
            target.pop(i, None)
    return out
