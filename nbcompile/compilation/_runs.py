"""What a run of a Compilation measures: bench, ablation, debug, freeze, profile, memory.

A mixin of :class:`~nbcompile.compilation.Compilation` (no fields of its own: the results live
in the Compilation's declared slots). Each method runs one measurement on the *live* call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..stages import Progress

if TYPE_CHECKING:
    from ..capture.models import Adapted
    from ..pipeline import Program

__all__ = ["Runs"]


class Runs:
    """``run_bench``, ``run_ablation``, ``run_debug``, ``freeze``, ``run_profile``,
    ``memory_map``, ``memory_options`` (see :class:`~nbcompile.compilation.Compilation`)."""

    __slots__ = ()
    if TYPE_CHECKING:  # the Compilation's fields these methods use
        program: Program
        adapted: Adapted
        args: tuple[Any, ...]
        kwargs: dict[str, Any]
        runnable: bool
        cache_hit: bool
        grad: Any
        _bench: Any
        _ablation: Any
        _debug: Any
        _frozen: Any
        _profile: Any
        _memory_map: Any
        _timings: dict[str, float]

    def _require_runnable(self, what: str) -> None:
        if self.runnable:
            return
        from ..errors import TargetError

        why = (
            "its example arguments are abstract (jax.ShapeDtypeStruct)"
            if self.target.present
            else f"it was compiled for {self.target.label}, which is not here"
        )
        raise TargetError(
            f"cannot {what}: {why}",
            code="NBC210",
            hint="compile with real arrays on a device that is present to measure",
        )

    def run_bench(self, progress: Progress | None = None) -> Any:
        """Measure eager vs compiled calls, compile time and break-even (``--bench``)."""
        from ..measure import bench

        self._require_runnable("benchmark")
        result = bench(
            self.original,
            self.args,
            kwargs=self.kwargs,
            compiled=self.fn,
            compile_seconds=self._xla_compile_seconds(),
            progress=progress,
            hlo=self.hlo,
        )
        self._bench = result
        for side in ("eager", "compiled"):
            timing = getattr(result, side, None)
            if timing is not None and timing.median is not None:
                self._timings[f"{side}_call"] = float(timing.median)
        return result

    def _xla_compile_seconds(self) -> float:
        """Seconds a real XLA compile of this program takes: the compile stage's own figure
        when XLA compiled, else one fresh compile now (JAX served it from a cache, whose lookup
        time says nothing about compiling)."""
        stages = self.stages
        if stages.xla_compiles and not self.cache_hit:
            return (
                stages.timings.get("trace", 0.0)
                + stages.timings.get("lower", 0.0)
                + stages.timings["compile"]
            )
        t0 = time.perf_counter()
        # a no-op debug option gives a fresh cache key, so XLA really compiles
        options = {**self.program.request.compiler_options, "xla_dump_max_hlo_modules": -1}
        stages.lowered.compile(compiler_options=options)
        compile_s = time.perf_counter() - t0
        self._timings["compile_measured"] = compile_s
        return stages.timings.get("trace", 0.0) + stages.timings.get("lower", 0.0) + compile_s

    def run_ablation(self, progress: Progress | None = None) -> Any:
        """Recompile with fusion / constant folding off and measure what each bought."""
        from ..measure import ablate

        if progress:
            progress("ablating (recompiling without fusion / constant folding)")
        self._ablation = ablate(
            self.lowered,
            self.args,
            kwargs=self.kwargs,
            time_it=self.runnable,
            platform=self.backend,
        )
        return self._ablation

    def run_debug(self, progress: Progress | None = None) -> Any:
        """Run the traced program op by op, keeping every intermediate (``--debug``)."""
        from ..debug import debug_run

        self._require_runnable("debug-run the program")
        if progress:
            progress("debugging (running op by op)")
        import jax

        compiled = jax.tree.leaves(self.fn(*self.args, **self.kwargs))  # the program itself
        self._debug = debug_run(
            self.jaxpr,
            (self.args, self.kwargs),
            source=self.source,
            compiled_outputs=compiled,
            hlo=self.hlo,
        )
        if self._debug.stopped:
            self.add_note(str(self._debug.error()))
        divergence = self._debug.divergence
        if divergence is not None and divergence.differs:
            self.add_note(
                "the compiled program computes something different from its "
                "op-by-op run: " + divergence.text().splitlines()[0]
            )
        return self._debug

    def freeze(
        self, path: str, *, constants: bool = False, progress: Progress | None = None
    ) -> Any:
        """Write the frozen single-file model with the *live* weights (``--freeze``)."""
        from ..frozen import freeze as freeze_model

        if not self.runnable and not self.target.present:
            self._require_runnable("freeze")
        if progress:
            progress(f"freezing to {path}")
        weights = self.adapted.weights_argnums or None
        # With --grad the training graph (value_and_grad) is the reference the frozen inference
        # program is compared with, in the same unit: StableHLO ops.
        reference = self.grad.analysis.summary().get("stablehlo_ops") if self.grad else None
        fn, args = self.original, self.args
        if self.kwargs:
            kwargs = self.kwargs
            fn = _with_kwargs(self.original, kwargs)
            args = (*args, *kwargs.values())
        self._frozen = freeze_model(
            fn,
            *args,
            path=path,
            weights_argnums=weights,
            constants=constants,
            name=self.name,
            reference_ops=reference,
        )
        return self._frozen

    def run_profile(self, calls: int = 20) -> Any:
        """Measure where the time goes: ``calls`` calls under JAX's profiler (``--profile``)."""
        from ..measure.profile import profile

        if self.target.present:  # deviceless targets get an estimate from XLA's cost model
            self._require_runnable("profile")
        self._profile = profile(self, calls=calls)
        return self._profile

    @property
    def memory_map(self) -> Any:
        """Where the bytes go at the peak, line by line; computed on first use (``--memory``)."""
        if self._memory_map is None:
            from ..measure.memory import memory_map

            self._memory_map = memory_map(self)
        return self._memory_map

    @property
    def memory_map_if_computed(self) -> Any | None:
        """The memory map if it was computed already (``--memory`` or ``c.memory_map``)."""
        return self._memory_map

    def memory_options(self, **options: Any) -> Any:
        """Measured variants (remat policies, per-layer remat, donation, the largest batch that
        fits) with their peak, flops and fit; ``options`` go to
        :func:`nbcompile.measure.memory_options.memory_options` (``batch_size``, ``capacity``,
        ``policies``, ``layers``, ``donate``, ``search_batch``)."""
        from ..measure.memory_options import memory_options

        return memory_options(self, **options)


def _with_kwargs(fn: Callable[..., Any], kwargs: Mapping[str, Any]) -> Callable[..., Any]:
    """``fn(*args, **kwargs)`` as a function of positional arguments only (keyword values
    appended in order), for the frozen-file format, whose signature is positional."""
    names = list(kwargs)
    n = len(names)

    def positional(*values: Any) -> Any:
        return fn(*values[:-n], **dict(zip(names, values[-n:], strict=True)))

    positional.__name__ = getattr(fn, "__name__", "model")
    return positional
