"""Probe, not product: what Python 3.12's call events would cost the call capture (issue 26).

The call capture (``nbcompile/capture/calls.py``) watches every equation JAX stamps, because
Python 3.11 (the CI and benchmark Python here) has no cheap event for "a function of the user's
started / returned". Python 3.12's ``sys.monitoring`` has one: ``PY_START`` / ``PY_RETURN``
callbacks that return ``DISABLE`` for every code object that is not the user's fire, after the
first call of each, for the user's code only. This probe measures, on the GPT-2-small train
step's trace (the capture row's model), what that costs by itself:

- ``events``: the callbacks keep a stack of the user's running code objects;
- ``scopes``: they also push each user call onto JAX's name stack as a scope and pop it on
  return, so JAX itself stamps every equation with the calls (no per-equation hook at all).

Neither numbers calls (``block#3``), names library calls as written, nor builds a ``CallLog``:
it is the floor of the design, not the design. Run (Python >= 3.12, nbcompile's dependencies
installed)::

    python -m benchmarks.call_events_probe [--rounds N]

It prints the median ratio (trace with the callbacks / trace without) of the tracing thread's
CPU time over N interleaved pairs, and the distinct name stacks the ``scopes`` variant gave.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from typing import Any

TOOL = 3  # sys.monitoring tool id (0-2 and 5 are taken by debuggers, coverage, profilers)


def _probe(variant: str, rounds: int) -> tuple[float, list[float], list[float], set[str]]:
    from jax._src import source_info_util as siu

    from benchmarks._extra_models import build
    from nbcompile.capture.userfiles import is_user_file
    from nbcompile.stages import make_jitted

    mon = sys.monitoring  # Python >= 3.12
    ctx = siu._source_info_context
    users: dict[Any, bool] = {}
    stack: list[Any] = []
    scopes = variant == "scopes"

    def user(code: Any) -> bool:
        hit = users.get(code)
        if hit is None:
            hit = users[code] = is_user_file(code.co_filename)
        return hit

    def start(code: Any, offset: int) -> Any:
        if not user(code):
            return mon.DISABLE
        if scopes:
            now = ctx.context
            stack.append(now)
            ctx.context = now.replace(name_stack=now.name_stack.extend(code.co_name))
        else:
            stack.append(code)
        return None

    def leave(code: Any, offset: int, value: Any) -> Any:
        if not user(code):
            return mon.DISABLE
        if stack:
            saved = stack.pop()
            if scopes:
                ctx.context = saved
        return None

    def unwind(code: Any, offset: int, exc: BaseException) -> None:
        # PY_UNWIND cannot be disabled per code object: it fires for every frame an exception
        # leaves (tracing raises and catches a few internally)
        if stack and user(code):
            saved = stack.pop()
            if scopes:
                ctx.context = saved

    fn, args = build("GPT-2 small train")

    def trace(on: bool) -> tuple[float, Any]:
        jitted = make_jitted(fn)
        gc.collect()
        if on:
            events = mon.events
            mon.use_tool_id(TOOL, "nbcompile-probe")
            mon.register_callback(TOOL, events.PY_START, start)
            mon.register_callback(TOOL, events.PY_RETURN, leave)
            mon.register_callback(TOOL, events.PY_UNWIND, unwind)
            mon.set_events(TOOL, events.PY_START | events.PY_RETURN | events.PY_UNWIND)
        c0 = time.thread_time()
        try:
            traced = jitted.trace(*args)
        finally:
            seconds = time.thread_time() - c0
            if on:
                mon.set_events(TOOL, 0)
                mon.free_tool_id(TOOL)
                mon.restart_events()
        return seconds, traced

    trace(True)  # warm-up, unmeasured: both sides then meet the same warm caches
    trace(False)
    with_, without = [], []
    traced = None
    for i in range(rounds):
        order = (True, False) if i % 2 == 0 else (False, True)
        for on in order:
            seconds, got = trace(on)
            (with_ if on else without).append(seconds)
            if on:
                traced = got
    names = {str(e.source_info.name_stack) for e in traced.jaxpr.jaxpr.eqns} if traced else set()
    ratios = [a / b for a, b in zip(with_, without, strict=True)]
    return statistics.median(ratios), with_, without, names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    opts = parser.parse_args()
    if sys.version_info < (3, 12):
        raise SystemExit("needs Python >= 3.12 (sys.monitoring); this is " + sys.version)
    for variant in ("events", "scopes"):
        ratio, with_, without, names = _probe(variant, opts.rounds)
        print(
            f"{variant}: trace CPU ratio {ratio:.3f} over {opts.rounds} pairs "
            f"(with: median {statistics.median(with_):.3f} s, "
            f"without: {statistics.median(without):.3f} s); {len(names)} distinct name stacks"
        )
        if variant == "scopes":
            for name in sorted(names, key=len)[-3:]:
                print("   ", name)


if __name__ == "__main__":
    main()
