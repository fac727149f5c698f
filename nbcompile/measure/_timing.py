"""Timing one callable: warm-up, adaptive repeats under a time budget, median and spread.

Each sample times ``number`` back-to-back calls (enough to last ~2 ms, so timer resolution and
call jitter stay small) and is divided by ``number``. The number of samples adapts to the budget
(at most 51). The budget is a soft cap: at least 3 samples are taken unless a single call is
longer than the whole budget, so a slow warm-up cannot leave one noisy sample. Callers pass a ``call`` that blocks until the result is
ready (``jax.block_until_ready``), so asynchronous dispatch cannot hide work.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

__all__ = ["Timing", "time_call"]

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


def time_call(call: Callable[[], object], budget: float) -> Timing:
    """Time ``call`` (which must block until done) within about ``budget`` seconds."""
    start = time.perf_counter()
    call()
    first = time.perf_counter() - start
    t0 = time.perf_counter()
    call()
    estimate = max(time.perf_counter() - t0, 1e-9)
    per_call = [estimate]
    number = max(1, min(1000, int(_SAMPLE_SECONDS / estimate)))
    deadline = start + budget
    if estimate < budget:  # else one call is over budget: the estimate is the only sample
        while len(per_call) <= _MAX_SAMPLES:
            enough = len(per_call) > _MIN_SAMPLES  # per_call[0] is the estimate, dropped below
            if enough and time.perf_counter() + estimate * number > deadline:
                break
            t0 = time.perf_counter()
            for _ in range(number):
                call()
            per_call.append((time.perf_counter() - t0) / number)
    if len(per_call) > 1:
        per_call = per_call[1:]  # the estimate call ran alone, right after the warm-up
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
