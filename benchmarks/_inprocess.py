"""Figures measured inside the harness process: call overhead, compile total, eager vs compiled.

JAX's persistent compilation cache stays off here (``benchmarks.__main__`` disables it), and
every compile repetition builds its model afresh, so both sides really trace, lower and compile;
the number of XLA compiles each side did is recorded to prove it.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

import jax

from benchmarks._extra_models import build
from benchmarks._stats import Row, Target, cold, paired, ratio_at_most

__all__ = ["XlaCompileCounter", "call_overhead", "compile_total", "eager_speedup"]


class XlaCompileCounter:
    """Counts XLA backend compiles (jax.monitoring event), to prove no cache served a side."""

    EVENT = "/jax/core/compile/backend_compile_duration"
    _instance: XlaCompileCounter | None = None

    def __init__(self) -> None:
        self.count = 0
        jax.monitoring.register_event_duration_secs_listener(self._listen)

    def _listen(self, name: str, *_: Any, **__: Any) -> None:
        if name == self.EVENT:
            self.count += 1

    @classmethod
    def get(cls) -> XlaCompileCounter:
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance


def _per_call(fn: Callable[..., Any], args: tuple[Any, ...], calls: int) -> Callable[[], float]:
    def run() -> float:
        t0 = time.perf_counter()
        for _ in range(calls):
            jax.block_until_ready(fn(*args))
        return (time.perf_counter() - t0) / calls

    return run


def call_overhead(model: str, pairs: int, calls: int) -> Row:
    """Calling ``c.fn`` (what ``%%compile`` binds) vs ``jax.jit(f)`` on the same arguments."""
    import nbcompile

    fn, args = build(model)
    subject_fn = nbcompile.compile(fn, *args).fn
    anchor_fn = jax.jit(fn)
    for f in (subject_fn, anchor_fn):
        for _ in range(3):
            jax.block_until_ready(f(*args))
    row = Row(
        "call overhead",
        model,
        "s",
        "c.fn call",
        "jax.jit call",
        target=Target("ratio", "<=", 1.02, "≤ 1.02 (limit 1.00)"),
        note=f"{pairs} pairs x {calls} calls each, block_until_ready per call",
    )
    subj, anch = paired(
        _per_call(subject_fn, args, calls), _per_call(anchor_fn, args, calls), pairs
    )
    row.set_pairs(subj, anch)
    return row


def compile_total(model: str, pairs: int, target: float | None) -> Row:
    """``nbcompile.compile`` + all analyses + report vs bare ``jit(f).lower().compile()``."""
    import nbcompile

    counter = XlaCompileCounter.get()
    compiles: dict[str, list[int]] = {"subject": [], "anchor": []}

    def measure(side: str, work: Callable[[Callable[..., Any], tuple[Any, ...]], Any]) -> float:
        fn, args = build(model)  # fresh closure: no trace/lowering/executable cache can hit
        gc.collect()
        before = counter.count
        t0 = time.perf_counter()
        result = work(fn, args)
        seconds = time.perf_counter() - t0
        compiles[side].append(counter.count - before)
        del result
        return seconds

    def ours(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        cold()  # a first compile: no analysis of an identical earlier repetition to reuse
        c = nbcompile.compile(fn, *args)
        c.analysis  # noqa: B018 - computing every analysis is the point
        return c.report()

    def bare(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        return jax.jit(fn).lower(*args).compile()

    row = Row(
        "compile total",
        model,
        "s",
        "nbcompile.compile+analysis+report",
        "jit.lower().compile()",
        target=ratio_at_most(target),
        note=f"{pairs} pairs, fresh model per repetition",
    )
    subj, anch = paired(lambda: measure("subject", ours), lambda: measure("anchor", bare), pairs)
    row.set_pairs(subj, anch)
    row.extra["xla_compiles"] = compiles
    if 0 in compiles["anchor"] or 0 in compiles["subject"]:
        row.note += "; WARNING: a repetition did no XLA compile (cache served it)"
    return row


def eager_speedup(model: str, pairs: int, eager_calls: int, compiled_calls: int) -> Row:
    """Op-by-op (``jax.disable_jit``) vs the compiled function, per call."""
    import nbcompile

    fn, args = build(model)
    compiled = nbcompile.compile(fn, *args).fn

    def eager(*a: Any) -> Any:
        with jax.disable_jit():
            return fn(*a)

    for f in (eager, compiled):
        for _ in range(2):
            jax.block_until_ready(f(*args))
    row = Row(
        "eager / compiled",
        model,
        "s",
        "eager call",
        "compiled call",
        better="none",
        note=f"{pairs} pairs; {eager_calls} eager and {compiled_calls} compiled calls each; "
        "ratio = speed-up of compiling",
    )
    subj, anch = paired(
        _per_call(eager, args, eager_calls), _per_call(compiled, args, compiled_calls), pairs
    )
    row.set_pairs(subj, anch)
    return row
