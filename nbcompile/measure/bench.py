"""``bench``: an ordinary eager call vs the compiled program, with compile time and break-even.

Three ways to run the same function are timed (medians over repeated, blocked calls, taken in
turns so that a busy moment of the machine slows every side alike: ``_timing``):

* **eager** — the ordinary call ``fn(*args)`` without ``jit``, what a user runs: each primitive
  is dispatched as its own small executable, and library functions that are themselves jitted
  (and ``scan``/``while``/``cond``) run as one executable each;
* **op by op** — under ``jax.disable_jit()``: nested jits unrolled into single primitives and
  loops run in Python. Slower than eager for reasons that have nothing to do with XLA's
  optimisations, so it is reported beside eager, never as the baseline;
* **compiled** — the XLA executable.

Kernel counts: eager = executables an ordinary call dispatches (``_eager.eager_dispatches``,
from the traced program; "at least" where a ``shard_map`` hides them); op by op = primitives a
replay of the program dispatches (``nbcompile.debug.Interpreter``, loop bodies once per
iteration); compiled = top-level kernels of the optimised ENTRY computation.

Small ops are limited by **dispatch cost**, a different effect from fusion: ``dispatch`` times
one eager dispatch of a 1-element add (measured), and ``dispatch_share`` estimates how much of
the eager time ``eager_kernels`` such dispatches account for. ``--ablate`` measures what fusion
itself bought (compiled with and without it).

Break-even: the calls after which compiling has paid for itself,
``ceil(compile_seconds / (eager - compiled))`` (None when compiled is not faster).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp

from ..debug.interpreter import Interpreter
from ._calls import CallForm
from ._eager import OpByOp, eager_dispatches
from ._hlo import entry_kernels
from ._timing import Prepared, Timing, _fmt, time_call, time_calls_in_turns

__all__ = ["SMALL_SPEEDUP", "BenchResult", "bench"]

#: Below this speed-up the result explains why (``BenchResult.why``).
SMALL_SPEEDUP = 1.5


def _count(n: int | None, exact: bool) -> str:
    if n is None:
        return "unknown"
    return f"{n}" if exact else f"at least {n}"


@dataclass
class BenchResult:
    """Eager vs compiled figures. Times are seconds per call (:class:`Timing`), all measured.

    ``eager_kernels`` / ``op_by_op_kernels`` are lower bounds where ``eager_kernels_exact`` /
    ``op_by_op_exact`` is False (a ``shard_map`` runs its body per device), None when unknown
    (a note says why). ``dispatch`` is one eager dispatch of a 1-element add; ``dispatch_share``
    (an estimate) is ``eager_kernels * dispatch.median / eager.median``.
    """

    eager: Timing
    compiled: Timing
    compile_seconds: float | None
    compile_measured: bool
    eager_kernels: int | None
    compiled_kernels: int | None
    dot_ops: int | None = None
    dot_flop_fraction: float | None = None
    notes: list[str] = field(default_factory=list)
    eager_kernels_exact: bool = True
    op_by_op: Timing | None = None
    op_by_op_kernels: int | None = None
    op_by_op_exact: bool = True
    dispatch: Timing | None = None

    @property
    def speedup(self) -> float:
        """Ordinary eager call / compiled (medians)."""
        return self.eager.median / self.compiled.median

    @property
    def op_by_op_speedup(self) -> float | None:
        return self.op_by_op.median / self.compiled.median if self.op_by_op else None

    @property
    def dispatch_share(self) -> float | None:
        """Estimated share of the eager time that is per-op dispatch (None without the figures;
        with a lower-bound op count it is a lower bound too)."""
        if self.dispatch is None or self.eager_kernels is None:
            return None
        return min(1.0, self.eager_kernels * self.dispatch.median / self.eager.median)

    @property
    def break_even_calls(self) -> int | None:
        gain = self.eager.median - self.compiled.median
        if self.compile_seconds is None or gain <= 0:
            return None
        return max(1, math.ceil(self.compile_seconds / gain))

    @property
    def within_noise(self) -> bool:
        """The two IQRs overlap: the difference is within run-to-run spread."""
        return self.eager.q25 <= self.compiled.q75 and self.compiled.q25 <= self.eager.q75

    @property
    def why(self) -> str | None:
        """A sentence explaining a small speed-up (None when the speed-up is not small)."""
        s = self.speedup
        if s >= SMALL_SPEEDUP:
            return None
        head = f"Compiled is {'slower than eager' if s < 1 else 'only'} {s:.2f}×"
        head += " (within run-to-run spread)" if self.within_noise else ""
        frac = self.dot_flop_fraction
        if frac is not None and frac >= 0.5 and self.dot_ops:
            return (
                f"{head}: {frac:.0%} of the arithmetic is in {self.dot_ops} dot/conv op(s), which "
                "run the same library kernels eager or compiled; fusion only removes the cheap "
                "element-wise ops around them."
            )
        ek, ck = self.eager_kernels, self.compiled_kernels
        if ek is not None and self.eager_kernels_exact and ck is not None and ek <= max(2 * ck, 4):
            return (
                f"{head}: eager dispatches only {ek} op(s) against {ck} compiled kernel(s), so "
                "there is little per-op overhead for compilation to remove."
            )
        return (
            f"{head}: the time is in the kernels' own work at this size, not in per-op dispatch; "
            f"merging {_count(ek, self.eager_kernels_exact)} eager dispatches into "
            f"{_count(ck, True)} kernels saves memory traffic but not much time."
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "eager": self.eager.to_json(),
            "compiled": self.compiled.to_json(),
            "op_by_op": self.op_by_op.to_json() if self.op_by_op else None,
            "dispatch": self.dispatch.to_json() if self.dispatch else None,
            "speedup": self.speedup,
            "op_by_op_speedup": self.op_by_op_speedup,
            "dispatch_share": self.dispatch_share,
            "compile_seconds": self.compile_seconds,
            "compile_measured": self.compile_measured,
            "break_even_calls": self.break_even_calls,
            "eager_kernels": self.eager_kernels,
            "eager_kernels_exact": self.eager_kernels_exact,
            "op_by_op_kernels": self.op_by_op_kernels,
            "op_by_op_exact": self.op_by_op_exact,
            "compiled_kernels": self.compiled_kernels,
            "dot_ops": self.dot_ops,
            "dot_flop_fraction": self.dot_flop_fraction,
            "why": self.why,
            "notes": list(self.notes),
        }

    def text(self) -> str:
        ek = _count(self.eager_kernels, self.eager_kernels_exact)
        lines = [f"eager    {self.eager.text()}, {ek} ops dispatched (ordinary call, no jit)"]
        if self.op_by_op is not None:
            ok = _count(self.op_by_op_kernels, self.op_by_op_exact)
            lines.append(f"op by op {self.op_by_op.text()}, {ok} primitives (jax.disable_jit)")
        lines += [
            f"compiled {self.compiled.text()}, {_count(self.compiled_kernels, True)} kernels",
            f"speed-up {self.speedup:.2f}× over eager",
        ]
        if self.compile_seconds is not None:
            be = self.break_even_calls
            pays = f"pays for itself after {be} call(s)" if be else "never pays for itself"
            lines[-1] += f"; compile {_fmt(self.compile_seconds)} {pays}"
        share = self.dispatch_share
        if share is not None and self.dispatch is not None:
            bound = "" if self.eager_kernels_exact else "at least "
            lines.append(
                f"dispatch {_fmt(self.dispatch.median)} per eager op (measured) × {ek} ops ≈ "
                f"{bound}{share:.0%} of the eager time (estimate)"
            )
        if self.why:
            lines.append(self.why)
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def _kernels(compiled: Any, hlo: str | None, form: CallForm) -> str | None:
    """The optimised HLO text (None when the backend has no text view)."""
    if hlo is not None:
        return hlo
    try:
        if hasattr(compiled, "as_text"):
            return compiled.as_text()
        if hasattr(compiled, "lower"):
            return compiled.lower(*form.args, **form.kwargs).compile().as_text()
    except NotImplementedError:  # Compiled.as_text: "text view unsupported" on this backend
        return None
    return None


def _one_dispatch() -> Timing:
    """One eager dispatch of a 1-element add: the fixed cost every eager op pays."""
    a = jnp.ones((1,), jnp.float32)
    add = jax.lax.add
    return time_call(lambda: jax.block_until_ready(add(a, a)), 0.1)


def bench(
    fn: Callable[..., Any],
    args: Sequence[Any],
    *,
    kwargs: dict[str, Any] | None = None,
    compiled: Callable[..., Any] | None = None,
    compile_seconds: float | None = None,
    hlo: str | None = None,
    op_by_op: bool = True,
    max_seconds: float = 10.0,
    progress: Callable[[str], None] | None = None,
    form: CallForm | None = None,
) -> BenchResult:
    """Measure ``fn(*args)`` eager vs compiled within about ``max_seconds`` in all.

    ``compiled`` is a ``jax.stages.Compiled`` or ``jax.jit`` object (default: ``jax.jit(fn)``,
    compiled here); ``compile_seconds`` is the trace+lower+compile time if already known
    (otherwise it is measured here when this function compiles); ``hlo`` is its optimised HLO
    text if already known (else it is read from ``compiled``). ``op_by_op=False`` skips timing
    the ``jax.disable_jit()`` run. ``max_seconds`` is a soft cap on the whole measurement: the
    compile, the op-count replay and each side's warm-up always run, and each side takes at
    least 3 samples (in turns with the others) unless one round is longer than the budget.

    ``form`` (:class:`~nbcompile.measure._calls.CallForm`, default: ``args``/``kwargs`` with
    nothing static or donated) says which arguments are static and which buffers ``compiled``
    donates: donated ones get fresh copies before every compiled call (not timed), so the
    arguments are never consumed.
    """
    say = progress or (lambda _msg: None)
    start = time.perf_counter()
    form = form or CallForm.of(tuple(args), dict(kwargs or {}))
    notes: list[str] = []
    measured = False
    if compiled is None:
        say("bench: compiling")
        t0 = time.perf_counter()
        jitted = jax.jit(
            fn,
            static_argnums=tuple(form.static_argnums),
            static_argnames=tuple(form.static_argnames),
        )
        compiled = jitted.trace(*form.args, **form.kwargs).lower().compile()
        if compile_seconds is None:
            compile_seconds, measured = time.perf_counter() - t0, True
    elif compile_seconds is None:
        notes.append("compile time not given: break-even unknown")
    self_jitted = hasattr(fn, "lower") and hasattr(fn, "trace")
    if self_jitted:
        notes.append("the function is itself jitted: its ordinary call runs a compiled program")

    say("bench: counting eager ops")
    closed = jax.make_jaxpr(form.with_static_bound(fn))(*form.dynamic_values())
    eager_kernels, eager_exact = eager_dispatches(closed)
    replay = OpByOp()
    interp = Interpreter(replay)
    interp.run(closed, [jnp.asarray(a) for a in jax.tree.leaves(form.dynamic_values())])
    if interp.opaque:
        opaque = sorted(set(interp.opaque.values()))
        notes.append(
            f"{', '.join(opaque)} runs its body per device: eager and op-by-op op counts are "
            "lower bounds"
        )
    text = _kernels(compiled, hlo, form)
    compiled_kernels = len(entry_kernels(text)) if text else None
    if text is None:
        notes.append("compiled kernel count unavailable: the backend gives no HLO text")
    if form.donates:
        notes.append(
            f"--donate {', '.join(form.donated_names())}: each compiled call got fresh copies "
            "of the donated arguments (made before the call, not timed); yours are untouched"
        )
    run_eager, run_op_by_op, run_compiled = _sides(fn, compiled, form, self_jitted)

    # eager, op by op and compiled in turns: a busy moment slows each side for a sample
    say("bench: timing eager, op by op and compiled calls in turns")
    budget = max(0.95 * (max_seconds - (time.perf_counter() - start)), 0.1)
    sides = [run_eager, run_op_by_op, run_compiled] if op_by_op else [run_eager, run_compiled]
    timings = time_calls_in_turns(sides, budget)
    eager, fast = timings[0], timings[-1]
    slow = timings[1] if op_by_op else None
    dispatch = _one_dispatch()
    say("bench: done")
    return BenchResult(
        eager=eager,
        compiled=fast,
        compile_seconds=compile_seconds,
        compile_measured=measured,
        eager_kernels=eager_kernels,
        eager_kernels_exact=eager_exact,
        compiled_kernels=compiled_kernels,
        op_by_op=slow,
        op_by_op_kernels=replay.kernels,
        op_by_op_exact=not interp.opaque,
        dot_ops=replay.dot_ops,
        dot_flop_fraction=replay.dot_fraction,
        dispatch=dispatch,
        notes=notes,
    )


Inputs = tuple[tuple[Any, ...], dict[str, Any]]


def _side(prepare: Callable[[], Inputs], run: Callable[[Inputs], None], fresh: bool) -> Any:
    """A timed side: a :class:`Prepared` when each call needs fresh inputs, else a plain call."""
    return Prepared(prepare, run) if fresh else (lambda: run(prepare()))


def _sides(fn: Callable[..., Any], compiled: Any, form: CallForm, self_jitted: bool) -> list[Any]:
    """The eager, op-by-op and compiled calls, each on inputs it may consume: the compiled
    program's donated leaves are copied before each call, and so is every array for a function
    the user jitted (its own ``donate_argnums`` are not known here)."""

    def plain() -> Inputs:
        return form.args, form.kwargs

    def eager(inputs: Inputs) -> None:
        jax.block_until_ready(fn(*inputs[0], **inputs[1]))

    def op_by_op(inputs: Inputs) -> None:
        with jax.disable_jit():
            jax.block_until_ready(fn(*inputs[0], **inputs[1]))

    def run(inputs: Inputs) -> None:
        jax.block_until_ready(compiled(*inputs[0], **inputs[1]))

    # a jax.jit object takes the full call (static values included), a Compiled the dynamic one
    prepare = form.fresh if hasattr(compiled, "lower") else form.fresh_dynamic
    own = form.fresh_all if self_jitted else plain
    return [
        _side(own, eager, self_jitted),
        _side(own, op_by_op, self_jitted),
        _side(prepare, run, form.donates),
    ]
