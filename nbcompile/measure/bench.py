"""``bench``: eager (op by op) vs compiled, with compile time, break-even and kernel counts.

* **eager** runs ``fn`` under ``jax.disable_jit()``: every primitive is dispatched as its own
  kernel (loops run in Python), which is what JAX does without ``jit``;
* **compiled** calls the XLA executable;
* both are timed with warm-up, ``block_until_ready`` and adaptive repeats (see ``_timing``);
* **kernels**: eager = primitive applications dispatched, counted by replaying the traced
  program op by op (``nbcompile.debug.Interpreter``; loop bodies count once per iteration);
  compiled = top-level kernels of the optimised ENTRY computation (``_hlo.entry_kernels``);
* **break-even**: the number of calls after which compiling has paid for itself,
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
import numpy as np

from ..debug.interpreter import Interpreter
from ._hlo import entry_kernels
from ._timing import Timing, _fmt, time_call

__all__ = ["SMALL_SPEEDUP", "BenchResult", "bench"]

#: Below this speed-up the result explains why (``BenchResult.why``).
SMALL_SPEEDUP = 1.5
_DATA_MOVEMENT = frozenset(
    {
        "broadcast_in_dim", "reshape", "transpose", "squeeze", "expand_dims",
        "convert_element_type", "iota", "copy", "copy_p", "slice", "dynamic_slice",
        "dynamic_update_slice", "concatenate", "gather", "pad", "rev",
    }
)  # fmt: skip


@dataclass
class _Work:
    """What the eager replay saw: ops dispatched and an analytic flop split."""

    kernels: int = 0
    dot_ops: int = 0
    dot_flops: float = 0.0
    other_flops: float = 0.0

    def __call__(
        self, nid: str, eqn: Any, invals: list, outvals: list, it: tuple, leaf: bool
    ) -> None:
        if not leaf:
            return
        self.kernels += 1
        name = eqn.primitive.name
        out_size = sum(int(np.prod(np.shape(o))) for o in outvals)
        if name == "dot_general":
            (lhs_contract, _), _ = eqn.params["dimension_numbers"]
            k = int(np.prod([np.shape(invals[0])[d] for d in lhs_contract]))
            self.dot_ops += 1
            self.dot_flops += 2.0 * out_size * k
        elif name == "conv_general_dilated":
            rhs_shape = np.shape(invals[1])
            out_features = rhs_shape[eqn.params["dimension_numbers"].rhs_spec[0]]
            self.dot_ops += 1
            self.dot_flops += 2.0 * out_size * int(np.prod(rhs_shape)) / max(out_features, 1)
        elif name not in _DATA_MOVEMENT:
            self.other_flops += out_size

    @property
    def dot_fraction(self) -> float | None:
        total = self.dot_flops + self.other_flops
        return self.dot_flops / total if total else None


@dataclass
class BenchResult:
    """Eager vs compiled figures. Times are seconds per call (:class:`Timing`)."""

    eager: Timing
    compiled: Timing
    compile_seconds: float | None
    compile_measured: bool
    eager_kernels: int | None
    compiled_kernels: int | None
    dot_ops: int | None = None
    dot_flop_fraction: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def speedup(self) -> float:
        return self.eager.median / self.compiled.median

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
        if ek is not None and ck is not None and ek <= max(2 * ck, 4):
            return (
                f"{head}: eager dispatches only {ek} op(s) against {ck} compiled kernel(s), so "
                "there is little per-op overhead for compilation to remove."
            )
        return (
            f"{head}: the time is in the kernels' own work at this size, not in per-op dispatch; "
            f"merging {ek} ops into {ck} kernels saves memory traffic but not much time."
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "eager": self.eager.to_json(),
            "compiled": self.compiled.to_json(),
            "speedup": self.speedup,
            "compile_seconds": self.compile_seconds,
            "compile_measured": self.compile_measured,
            "break_even_calls": self.break_even_calls,
            "eager_kernels": self.eager_kernels,
            "compiled_kernels": self.compiled_kernels,
            "dot_ops": self.dot_ops,
            "dot_flop_fraction": self.dot_flop_fraction,
            "why": self.why,
            "notes": list(self.notes),
        }

    def text(self) -> str:
        lines = [
            f"eager    {self.eager.text()}, {self.eager_kernels} ops dispatched",
            f"compiled {self.compiled.text()}, {self.compiled_kernels} kernels",
            f"speed-up {self.speedup:.2f}×",
        ]
        if self.compile_seconds is not None:
            be = self.break_even_calls
            pays = f"pays for itself after {be} call(s)" if be else "never pays for itself"
            lines[-1] += f"; compile {_fmt(self.compile_seconds)} {pays}"
        if self.why:
            lines.append(self.why)
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def _compiled_hlo(compiled: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> str | None:
    if hasattr(compiled, "as_text"):
        return compiled.as_text()
    if hasattr(compiled, "lower"):
        return compiled.lower(*args, **kwargs).compile().as_text()
    return None


def bench(
    fn: Callable[..., Any],
    args: Sequence[Any],
    *,
    kwargs: dict[str, Any] | None = None,
    compiled: Callable[..., Any] | None = None,
    compile_seconds: float | None = None,
    max_seconds: float = 10.0,
    progress: Callable[[str], None] | None = None,
) -> BenchResult:
    """Measure ``fn(*args)`` eager vs compiled within about ``max_seconds`` in all.

    ``compiled`` is a ``jax.stages.Compiled`` or ``jax.jit`` object (default: ``jax.jit(fn)``,
    compiled here); ``compile_seconds`` is the trace+lower+compile time if already known
    (otherwise it is measured here when this function compiles). ``max_seconds`` is a soft cap
    on the whole measurement: the compile, the op-count replay and each side's warm-up always run,
    and each side takes at least 3 samples unless one call is longer than its share. Arguments
    must be reusable across calls (no donated buffers).
    """
    say = progress or (lambda _msg: None)
    start = time.perf_counter()
    args = tuple(args)
    kwargs = dict(kwargs or {})
    notes: list[str] = []
    measured = False
    if compiled is None:
        say("bench: compiling")
        t0 = time.perf_counter()
        compiled = jax.jit(fn).trace(*args, **kwargs).lower().compile()
        if compile_seconds is None:
            compile_seconds, measured = time.perf_counter() - t0, True
    elif compile_seconds is None:
        notes.append("compile time not given: break-even unknown")

    say("bench: counting eager ops")
    work = _Work()
    try:
        closed = jax.make_jaxpr(fn)(*args, **kwargs)
        leaves = jax.tree.leaves((args, kwargs))
        Interpreter(work).run(closed, [jnp.asarray(a) for a in leaves])
        eager_kernels: int | None = work.kernels
    except Exception as exc:  # a replay failure must not lose the timings
        eager_kernels = None
        notes.append(f"eager op count unavailable: {type(exc).__name__}")
    try:
        text = _compiled_hlo(compiled, args, kwargs)
        compiled_kernels = len(entry_kernels(text)) if text else None
    except Exception as exc:
        compiled_kernels = None
        notes.append(f"compiled kernel count unavailable: {type(exc).__name__}")

    def run_eager() -> None:
        with jax.disable_jit():
            jax.block_until_ready(fn(*args, **kwargs))

    def run_compiled() -> None:
        jax.block_until_ready(compiled(*args, **kwargs))

    left = max(max_seconds - (time.perf_counter() - start), 0.05)
    say("bench: timing eager (op by op)")
    eager = time_call(run_eager, 0.6 * left)
    # eager may overrun its share (slow warm-up): compiled still gets at least its own share
    left = max(max_seconds - (time.perf_counter() - start), 0.4 * left)
    say("bench: timing compiled")
    fast = time_call(run_compiled, left)
    say("bench: done")
    return BenchResult(
        eager=eager,
        compiled=fast,
        compile_seconds=compile_seconds,
        compile_measured=measured,
        eager_kernels=eager_kernels,
        compiled_kernels=compiled_kernels,
        dot_ops=work.dot_ops if eager_kernels is not None else None,
        dot_flop_fraction=work.dot_fraction if eager_kernels is not None else None,
        notes=notes,
    )
