"""``time_calls_in_turns``: sides sampled in alternating rounds, so a slow phase of the machine
slows every side for a sample instead of one side for all of its samples."""

from __future__ import annotations

import itertools
import time

from nbcompile.measure._timing import time_calls_in_turns


def test_samples_alternate_between_the_sides():
    log: list[str] = []

    def side(name: str, seconds: float):
        def call() -> None:
            log.append(name)
            time.sleep(seconds)

        return call

    fast, slow = time_calls_in_turns([side("a", 0.001), side("b", 0.003)], budget=0.3)
    assert fast.samples >= 3 and slow.samples == fast.samples
    assert fast.median < slow.median
    timed = log[4:]  # after each side's warm-up and estimate call
    switches = sum(1 for x, y in itertools.pairwise(timed) if x != y)
    assert switches >= fast.samples - 1  # rounds a b | b a | a b ...: a switch in each round


def test_a_slow_phase_hits_both_sides_and_the_ratio_survives():
    """A stall that lasts ~a third of the measurement (another job on the machine) leaves the
    ratio of medians near the true 3x (timed one side after the other, the stall would land
    on the slow side only and report ~4x or more)."""
    stalled_until = [0.0]

    def side(seconds: float):
        def call() -> None:
            time.sleep(seconds * (4 if time.perf_counter() < stalled_until[0] else 1))

        return call

    eager, compiled = side(0.003), side(0.001)
    start = time.perf_counter()
    stalled_until[0] = start + 0.25
    a, b = time_calls_in_turns([eager, compiled], budget=0.6)
    assert 2.0 < a.median / b.median < 4.5
