"""Traced -> Lowered -> Compiled: JAX's AOT stages, timed, with errors translated.

Each stage keeps the JAX object it wraps (``jax.stages.Traced`` / ``Lowered`` / ``Compiled``) so
nothing is lost; introspection that a backend may not give is ``None``, never a crash.
"""

from __future__ import annotations

import contextlib
import io
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import jax

from ..capture.source import SourceInfo
from .errors import translate

__all__ = ["Stages", "make_jitted", "run_stages"]

Progress = Callable[[str], None]


@dataclass
class Stages:
    """The JAX stage objects of one compile and how long each took (seconds)."""

    jitted: Any
    traced: Any
    lowered: Any
    compiled: Any | None
    timings: dict[str, float] = field(default_factory=dict)
    printed_at_trace: str = ""
    _text: tuple[Any, str | None] | None = field(default=None, repr=False)

    @property
    def closed_jaxpr(self) -> Any:
        return self.traced.jaxpr

    @property
    def hlo_text(self) -> str | None:
        """``compiled.as_text()``, printed once per executable (a big module takes ~30 ms)."""
        if self.compiled is None:
            return None
        if self._text is None or self._text[0] is not self.compiled:
            try:
                text = self.compiled.as_text()
            except Exception:  # some backends give no text
                text = None
            self._text = (self.compiled, text)
        return self._text[1]


def recompile_with_metadata(
    stages: Stages, compiler_options: dict[str, Any] | None = None
) -> bool:
    """If the executable carries no source metadata, compile it afresh (True if it did).

    Executables restored from JAX's persistent cache keep the metadata of the process that
    first compiled them (cell files then match by content: see ``SourceInfo.is_cell_file``);
    one without any metadata could not be mapped back to cell lines at all.
    """
    text = stages.hlo_text
    if stages.compiled is None or text is None or "metadata={" in text:
        return False
    t0 = time.perf_counter()
    # A no-op debug option gives a fresh cache key, so XLA really compiles again.
    options = {**(compiler_options or {}), "xla_dump_max_hlo_modules": -1}
    stages.compiled = stages.lowered.compile(compiler_options=options)
    stages.timings["compile_for_analysis"] = time.perf_counter() - t0
    return True


def make_jitted(
    fn: Callable[..., Any],
    *,
    grad_argnums: tuple[int, ...] | None = None,
    jit_kwargs: dict[str, Any] | None = None,
) -> Any:
    """``jax.jit(fn)``, or ``jax.jit(jax.value_and_grad(fn, argnums))`` with ``--grad``."""
    target = fn
    if grad_argnums is not None:
        argnums = grad_argnums[0] if len(grad_argnums) == 1 else grad_argnums
        target = jax.value_and_grad(fn, argnums=argnums)
    return jax.jit(target, **(jit_kwargs or {}))


@contextlib.contextmanager
def _capture_stdout() -> Iterator[io.StringIO]:
    """Catch what Python ``print`` writes while tracing (it runs once, at trace time)."""
    buf = io.StringIO()
    old = sys.stdout
    sys.stdout = buf
    try:
        yield buf
    finally:
        sys.stdout = old


def run_stages(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None = None,
    *,
    source: SourceInfo | None = None,
    grad_argnums: tuple[int, ...] | None = None,
    jit_kwargs: dict[str, Any] | None = None,
    compiler_options: dict[str, Any] | None = None,
    progress: Progress | None = None,
    jitted: Any | None = None,
) -> Stages:
    """Trace, lower and compile ``fn(*args, **kwargs)`` for the default backend.

    Raises :class:`~nbcompile.errors.TraceError`, ``LowerError`` or ``CompileError`` naming the
    visible cell line (from ``source``) and what to do; JAX's error is chained.
    """
    __tracebackhide__ = True
    kwargs = kwargs or {}
    source = source or SourceInfo()
    if jitted is None:
        jitted = make_jitted(fn, grad_argnums=grad_argnums, jit_kwargs=jit_kwargs)
    timings: dict[str, float] = {}
    say = progress or (lambda _msg: None)

    say("tracing")
    t0 = time.perf_counter()
    try:
        with _capture_stdout() as printed:
            traced = jitted.trace(*args, **kwargs)
    except Exception as exc:
        raise translate(exc, "trace", source, fn=fn, jit_kwargs=jit_kwargs) from exc
    timings["trace"] = time.perf_counter() - t0

    say("lowering")
    t0 = time.perf_counter()
    try:
        lowered = traced.lower()
    except Exception as exc:
        raise translate(exc, "lower", source, fn=fn) from exc
    timings["lower"] = time.perf_counter() - t0

    say("compiling")
    t0 = time.perf_counter()
    try:
        if compiler_options:
            compiled = lowered.compile(compiler_options=compiler_options)
        else:
            compiled = lowered.compile()
    except Exception as exc:
        raise translate(exc, "compile", source, fn=fn) from exc
    timings["compile"] = time.perf_counter() - t0

    return Stages(
        jitted=jitted,
        traced=traced,
        lowered=lowered,
        compiled=compiled,
        timings=timings,
        printed_at_trace=printed.getvalue(),
    )
