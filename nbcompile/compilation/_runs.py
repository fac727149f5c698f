"""What a run of a Compilation measures: bench, ablation, debug, freeze, profile, memory.

A mixin of :class:`~nbcompile.compilation.Compilation` (no fields of its own: the results live
in the Compilation's declared slots). Each method runs one measurement on the *live* call, and
every one calls through :attr:`Runs.call_form`: the static values exactly as the compile used
them, fresh copies of every buffer the program donates (a measurement never consumes, deletes
or changes the user's arrays; the rebound function itself still donates, as asked).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .._compat import compile_fresh
from ..stages import Progress

if TYPE_CHECKING:
    from ..capture.models import Adapted
    from ..measure._calls import CallForm
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
        _processes: tuple[Any, ...]
        _timings: dict[str, float]

    def _read_live(self, what: str) -> None:
        """Read every model's arrays again (training may have replaced them since the compile,
        as a re-run would), and stop with NBC212 where an argument's arrays were deleted."""
        from ._live import live_args, require_alive

        self.args = live_args(self.adapted, self.args)
        require_alive(self.adapted, self.args, self.kwargs, what)

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

    @property
    def call_form(self) -> CallForm:
        """How this program is called (:class:`~nbcompile.measure._calls.CallForm`): the live
        example call, which of its arguments are static and which buffers the program donates,
        read from the same place the compile read them."""
        from ..measure._calls import CallForm
        from ..pipeline import _as_tuple, _jit_options

        jit_kwargs, static = _jit_options(self.adapted, self.program.request.jit_kwargs)
        return CallForm.of(
            self.args,
            self.kwargs,
            static_argnums=static,
            static_argnames=_as_tuple(jit_kwargs.get("static_argnames")),
            lowered=self.lowered,
            names=tuple(self.adapted.arg_names),
        )

    def run_bench(self, progress: Progress | None = None) -> Any:
        """Measure eager vs compiled calls, compile time and break-even (``--bench``)."""
        from ..measure import bench

        self._require_runnable("benchmark")
        self._read_live("benchmark")
        result = bench(
            self.original,
            self.args,
            kwargs=self.kwargs,
            compiled=self.fn,
            compile_seconds=self._xla_compile_seconds(),
            progress=progress,
            hlo=self.hlo,
            form=self.call_form,
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
        compile_fresh(stages.lowered, self.program.request.compiler_options)  # XLA compiles
        compile_s = time.perf_counter() - t0
        self._timings["compile_measured"] = compile_s
        return stages.timings.get("trace", 0.0) + stages.timings.get("lower", 0.0) + compile_s

    def run_ablation(self, progress: Progress | None = None) -> Any:
        """Recompile with fusion / constant folding off and measure what each bought."""
        from ..measure import ablate

        if progress:
            progress("ablating (recompiling without fusion / constant folding)")
        if self.runnable:
            self._read_live("ablate")
        form = self.call_form
        self._ablation = ablate(
            self.lowered,
            form.leaves(),
            time_it=self.runnable,
            platform=self.backend,
            form=form,
        )
        return self._ablation

    def run_debug(self, progress: Progress | None = None, *, forward: bool = False) -> Any:
        """Run the traced program op by op, keeping every intermediate (``--debug``).

        With ``--grad`` the program checked is ``value_and_grad`` (it holds the forward pass
        too, so a NaN in either pass is found); ``forward=True`` checks the forward program
        only. The result names the program it checked (``DebugResult.program``)."""
        checked = self if forward or self.grad is None else self.grad
        self._debug = checked._debug_run(progress)
        if checked is not self:
            checked._debug = self._debug
        if self._debug.stopped:
            self.add_note(str(self._debug.error()))
        divergence = self._debug.divergence
        if divergence is not None and divergence.differs:
            self.add_note(
                "the compiled program computes something different from its "
                "op-by-op run: " + divergence.text().splitlines()[0]
            )
        return self._debug

    def _debug_run(self, progress: Progress | None) -> Any:
        """:meth:`run_debug` of this very program."""
        import jax

        from ..debug import debug_run

        self._require_runnable("debug-run the program")
        self._read_live("debug-run the program")
        if progress:
            progress(f"debugging {self.name} (running op by op)")
        form = self.call_form
        # the program itself, on copies of what it donates
        compiled = jax.tree.leaves(form.call_jitted(self.fn))
        return debug_run(
            self.jaxpr,
            form.leaves(),
            source=self.source,
            compiled_outputs=compiled,
            hlo=self.hlo,
            program=self.name,
            compiler_options=self.program.request.compiler_options,
        )

    def freeze(
        self, path: str, *, constants: bool = False, progress: Progress | None = None
    ) -> Any:
        """Write the frozen single-file model with the *live* weights (``--freeze``)."""
        from ..capture.models import training_layers
        from ..frozen import freeze as freeze_model

        if not self.runnable and not self.target.present:
            self._require_runnable("freeze")
        self._read_live("freeze")
        if progress:
            progress(f"freezing to {path}")
        weights = self.adapted.weights_argnums or None
        # With --grad the training graph (value_and_grad) is the reference the frozen inference
        # program is compared with, in the same unit: StableHLO ops.
        reference = self.grad.analysis.summary().get("stablehlo_ops") if self.grad else None
        fn, args = self.original, self.args
        form = self.call_form
        if form.static_argnums or form.static_argnames:  # fixed in the program, as compiled
            fn, args = form.with_static_bound(self.original), tuple(form.dynamic_values())
            moved = [form.dynamic_position(i) for i in weights or ()]
            weights = tuple(i for i in moved if i is not None) or None
        elif self.kwargs:
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
        layers = training_layers(self.adapted.models)
        if layers:  # freezing writes what was traced: say when that was training behaviour
            self._frozen = dataclasses.replace(
                self._frozen,
                notes=(
                    f"frozen in training mode: {', '.join(layers)} froze their training "
                    "behaviour (a fixed dropout mask from the stored key, statistics of each "
                    "batch); call model.eval() before freezing for inference",
                ),
            )
        return self._frozen

    def run_profile(self, calls: int = 20) -> Any:
        """Measure where the time goes: ``calls`` calls under JAX's profiler (``--profile``)."""
        from ..measure.profile import profile

        if self.target.present:  # deviceless targets get an estimate from XLA's cost model
            self._require_runnable("profile")
            self._read_live("profile")
        self._profile = profile(self, calls=calls)
        if self._processes:  # several JAX processes: every one's profile, side by side
            from ..processes import gather_profiles

            self._profile.processes = gather_profiles(self, self._profile)
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
        ``policies``, ``layers``, ``donate``, ``search_batch``, ``batch_axis``, ``batch_args``);
        ``.largest_batch`` is the largest batch that fits, with its compile's peak and verdict."""
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
