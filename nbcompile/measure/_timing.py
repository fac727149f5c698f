"""Timing one callable: warm-up, adaptive repeats under a time budget, median and spread.

Each sample times ``number`` back-to-back calls (enough to last ~2 ms, so timer resolution and
call jitter stay small) and is divided by ``number``. The number of samples adapts to the budget
(at most 51). The budget is a soft cap: at least 3 samples are taken unless a single call is
longer than the whole budget, so a slow warm-up cannot leave one noisy sample. Callers pass a ``call`` that blocks until the result is
ready (``jax.block_until_ready``), so asynchronous dispatch cannot hide work.

A call that consumes its inputs (a program with donated arguments) is a :class:`Prepared`: its
``prepare`` makes fresh inputs before each call, outside the timed interval, and each of its
calls is timed on its own (one call per sample); the time budget counts the preparations.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Prepared", "Timing", "time_call", "time_calls_in_turns"]

_SAMPLE_SECONDS = 0.002
_MAX_SAMPLES = 51
_MIN_SAMPLES = 3


@dataclass(frozen=True)
class Timing:
    """Per-call seconds: ``median``, spread as ``q25``/``q75`` (IQR) and ``min``/``max``;
    ``samples`` timed samples of ``number`` calls each; ``first`` is the first (warm-up) call."""

    median: float
    q25: float
    q75: float
    min: float
    max: float
    samples: int
    number: int
    first: float

    @property
    def iqr(self) -> float:
        return self.q75 - self.q25

    def to_json(self) -> dict[str, float | int]:
        return {**asdict(self), "iqr": self.iqr}

    def text(self) -> str:
        return (
            f"{_fmt(self.median)} (IQR {_fmt(self.q25)}–{_fmt(self.q75)}, "
            f"{self.samples}×{self.number} calls)"
        )


@dataclass(frozen=True)
class Prepared:
    """A call that needs fresh inputs every time: ``prepare()`` (not timed) makes them and
    ``run(inputs)`` (timed) calls and blocks until the result is ready."""

    prepare: Callable[[], Any]
    run: Callable[[Any], object]


Call = Callable[[], object] | Prepared


def _sample(call: Call, number: int) -> tuple[float, float]:
    """``(seconds per call, wall seconds per call)`` over ``number`` calls: a
    :class:`Prepared`'s preparation is outside the first figure, inside the second (the time
    budget counts it)."""
    start = time.perf_counter()
    if isinstance(call, Prepared):
        total = 0.0
        for _ in range(number):
            inputs = call.prepare()
            t0 = time.perf_counter()
            call.run(inputs)
            total += time.perf_counter() - t0
        return total / number, (time.perf_counter() - start) / number
    for _ in range(number):
        call()
    per_call = (time.perf_counter() - start) / number
    return per_call, per_call


def _number(call: Call, estimate: float) -> int:
    """Calls per sample: enough to last ~2 ms; one for a :class:`Prepared` (timed alone)."""
    if isinstance(call, Prepared):
        return 1
    return max(1, min(1000, int(_SAMPLE_SECONDS / estimate)))


def _fmt(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} µs"


def _quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def time_call(call: Call, budget: float) -> Timing:
    """Time ``call`` (which must block until done) within about ``budget`` seconds."""
    start = time.perf_counter()
    first, _ = _sample(call, 1)
    estimate, wall = _sample(call, 1)
    estimate = max(estimate, 1e-9)
    per_call = [estimate]
    number = _number(call, estimate)
    deadline = start + budget
    if wall < budget:  # else one call is over budget: the estimate is the only sample
        while len(per_call) <= _MAX_SAMPLES:
            enough = len(per_call) > _MIN_SAMPLES  # per_call[0] is the estimate, dropped below
            if enough and time.perf_counter() + wall * number > deadline:
                break
            per_call.append(_sample(call, number)[0])
    if len(per_call) > 1:
        per_call = per_call[1:]  # the estimate call ran alone, right after the warm-up
    return _summary(per_call, number, first)


def _summary(per_call: list[float], number: int, first: float) -> Timing:
    q25, q75 = _quartiles(per_call)
    return Timing(
        median=statistics.median(per_call),
        q25=q25,
        q75=q75,
        min=min(per_call),
        max=max(per_call),
        samples=len(per_call),
        number=number,
        first=first,
    )


def time_calls_in_turns(calls: list[Call], budget: float) -> list[Timing]:
    """Time several callables against each other within about ``budget`` seconds in all.

    Samples are taken in turns (one sample of each callable per round, the order of the round
    alternating), so a slow phase of a shared machine slows every side for a sample instead of
    one side for all of its samples, and a ratio of medians stays honest. Each callable gets
    its own warm-up, its own ``number`` of calls per sample, and at least 3 samples unless one
    call is longer than the whole budget.
    """
    start = time.perf_counter()
    firsts, estimates, walls = [], [], []
    for call in calls:
        firsts.append(_sample(call, 1)[0])
        estimate, wall = _sample(call, 1)
        estimates.append(max(estimate, 1e-9))
        walls.append(wall)
    numbers = [_number(call, e) for call, e in zip(calls, estimates, strict=True)]
    samples: list[list[float]] = [[] for _ in calls]
    round_seconds = sum(w * n for w, n in zip(walls, numbers, strict=True))
    deadline = start + budget
    rounds = 0
    if round_seconds < budget:  # else a round is over budget: the estimates are the samples
        while rounds < _MAX_SAMPLES:
            if rounds >= _MIN_SAMPLES and time.perf_counter() + round_seconds > deadline:
                break
            order = range(len(calls)) if rounds % 2 == 0 else reversed(range(len(calls)))
            for i in order:
                samples[i].append(_sample(calls[i], numbers[i])[0])
            rounds += 1
    return [
        _summary(taken or [estimate], number if taken else 1, first)
        for first, estimate, number, taken in zip(firsts, estimates, numbers, samples, strict=True)
    ]
