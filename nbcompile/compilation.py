"""``nbcompile.compile`` and the ``Compilation`` it returns.

Two objects, so that a cache hit can never be stale:

- a :class:`Program` is what one trace → lower → compile produced (the JAX stage objects, the
  target, the lazily computed analysis, the ``value_and_grad`` program with ``--grad``). It
  depends only on what the cache key covers, so the cell cache stores and reuses Programs;
- a :class:`Compilation` is one *run*: a Program plus the live call (the callable, its example
  arguments and model weights as they are now) and what this run measured (bench, ablation,
  debug, freeze, profile, memory). Every ``%%compile`` run gets a fresh Compilation, so values
  are always read live and notes of earlier options never linger.

``Compilation`` is a closed type: every field is declared in ``__slots__`` and changed only by
its own methods. It renders itself: ``text/plain`` summary, self-contained HTML fallback, and
the interactive widget where a widget manager runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import jax

from ._compat import cell_files
from .capture.models import Adapted, adapt
from .capture.source import SourceInfo, source_of_function
from .pipeline import CompileRequest, Program, build_program, describe_args
from .stages import Progress

__all__ = ["Compilation", "Program", "compare", "compile"]


def _runnable(program: Program, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    leaves = jax.tree_util.tree_leaves((args, kwargs))
    abstract = any(isinstance(leaf, jax.ShapeDtypeStruct) for leaf in leaves)
    return program.stages.target.present and program.stages.compiled is not None and not abstract


class Compilation:
    """Everything one ``%%compile`` run / ``nbcompile.compile`` call produced.

    Figures a backend cannot give are ``None`` (documented per attribute), never faked.
    """

    __slots__ = (
        "__weakref__", "_ablation", "_bench", "_changes", "_changes_diff", "_debug", "_display",
        "_frozen",
        "_memory_map", "_notes", "_profile", "_report", "_shown", "_timings", "adapted",
        "args", "cache_hit", "grad", "kwargs", "program", "runnable",
    )

    def __init__(
        self,
        program: Program,
        adapted: Adapted,
        *,
        cache_hit: bool = False,
        display: Any = None,
    ) -> None:
        self.program = program
        self.adapted = adapted
        self.args: tuple[Any, ...] = tuple(adapted.args)
        self.kwargs: dict[str, Any] = dict(adapted.kwargs)
        self.cache_hit = cache_hit
        self.runnable = _runnable(program, self.args, self.kwargs)
        self.grad: Compilation | None = (
            Compilation(program.grad, adapted, cache_hit=cache_hit, display=display)
            if program.grad is not None else None
        )
        self._display = display
        self._notes: list[str] = []
        self._changes: list[str] = []
        self._changes_diff: Any = None
        self._timings: dict[str, float] = {}
        self._bench: Any = None
        self._ablation: Any = None
        self._debug: Any = None
        self._frozen: Any = None
        self._profile: Any = None
        self._memory_map: Any = None
        self._report: tuple[Any, dict[str, Any]] | None = None
        self._shown: Any = None
        if program.stages.target.note:
            self._notes.append(program.stages.target.note)
        grad_notes = self.grad.notes if self.grad is not None else ()
        self._notes += [n for n in (*program.stages.notes, *program.notes, *grad_notes)
                        if n not in self._notes]
        if not self.runnable and program.stages.target.present and program.stages.compiled:
            self._notes.append("compile-only: the example arguments are abstract "
                               "(jax.ShapeDtypeStruct), so nothing was allocated or run")

    # --- what was compiled ------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.program.name

    @property
    def fn(self) -> Any:
        """The compiled callable: the ``jax.jit`` object whose program this is (for a target
        that is not here it can be inspected, lowered and exported, not run here)."""
        return self.program.stages.jitted

    @property
    def original(self) -> Callable[..., Any]:
        """The pure function that was compiled (a model's call with its parameters explicit)."""
        return self.adapted.fn

    @property
    def source(self) -> SourceInfo:
        return self.program.source

    @property
    def target(self) -> Any:
        """The hardware :class:`nbcompile.targets.Target` this program was compiled for."""
        return self.program.stages.target

    @property
    def backend(self) -> str:
        return self.target.platform

    @property
    def options(self) -> dict[str, Any]:
        """The compile options that shaped the program (jit options, target, grad)."""
        return self.program.request.describe()

    @property
    def grad_argnums(self) -> tuple[int, ...] | None:
        return self.program.grad_argnums

    @property
    def signature(self) -> list[str]:
        """One line per argument: the user's name and the types of its leaves."""
        return describe_args(self.args, list(self.adapted.arg_names))

    @property
    def stages(self) -> Any:
        return self.program.stages

    @property
    def jaxpr(self) -> Any:
        """The closed jaxpr of the traced program."""
        return self.stages.closed_jaxpr

    @property
    def lowered(self) -> Any:
        return self.stages.lowered

    @property
    def compiled(self) -> Any | None:
        """``jax.stages.Compiled``, or None where the backend could not compile."""
        return self.stages.compiled

    @property
    def stablehlo(self) -> str:
        """StableHLO text before optimisation (with source locations)."""
        return self.stages.lowered.as_text(debug_info=True)

    @property
    def hlo(self) -> str | None:
        """XLA's optimised HLO text, or None where the backend could not compile."""
        return self.stages.hlo_text

    @property
    def placement(self) -> Any:
        """How the arguments were placed: shardings and per-device shapes (with a mesh)."""
        return self.stages.placement

    @property
    def timings(self) -> dict[str, float]:
        """Seconds this run spent, by phase; the phases add up to the whole cell.

        Phases (keys without a dot): the cell's steps when run by the magic (``capture``,
        ``run``, ``cache_lookup``, ``pipeline``, ``measure``, ``freeze``, ``bind``), the stages
        this run compiled (``trace``, ``lower``, ``compile``; ``grad_trace``... for ``--grad``'s
        program; absent on a cache hit, which compiled nothing), the analyses this run computed
        (``analyse``, ``grad_analyse``), ``report`` and ``display``. Keys with a dot are parts of
        the phase before the dot (``analyse.parse``); ``eager_call`` / ``compiled_call`` are
        ``--bench``'s per-call medians, not phases.
        """
        out: dict[str, float] = {}
        if not self.cache_hit:
            out.update(self.stages.timings)
        out.update(self._timings)
        if self.grad is not None:
            for key, seconds in self.grad.timings.items():
                if "." not in key and not key.endswith("_call"):
                    out[f"grad_{key}"] = seconds
        return out

    # --- analysis ----------------------------------------------------------------------------
    @property
    def analysis(self) -> Any:
        """The :class:`nbcompile.analysis.Analysis` of this program (computed on first use,
        by whichever run needs it first: that run's timings count it)."""
        return self._analyse()

    def _analyse(self, progress: Progress | None = None) -> Any:
        fresh = self.program._analysis is None
        analysis = self.program.analyse(progress)
        if fresh:
            self._timings["analyse"] = self.program.analysis_seconds or 0.0
            self._timings.update(getattr(analysis, "timings", None) or {})
        return analysis

    @property
    def graph(self) -> Any:
        """:class:`nbcompile.analysis.Graph` of the traced program."""
        return self.analysis.traced_graph

    @property
    def fusions(self) -> list[Any]:
        """The kernels XLA fused, each with member ops, kind, cost and source locations."""
        return self.analysis.fusions

    @property
    def folded(self) -> list[Any]:
        """Constants folded at trace, lowering or XLA compile time."""
        return self.analysis.folded

    @property
    def gradient(self) -> Any | None:
        """Forward/backward view of the ``value_and_grad`` program (None without ``grad``)."""
        return self.grad.analysis.gradient if self.grad is not None else None

    @property
    def cost(self) -> dict[str, Any] | None:
        """XLA's cost analysis, normalised (None where the backend reports none)."""
        return self.analysis.cost

    @property
    def memory(self) -> dict[str, Any] | None:
        """XLA's memory analysis, normalised (None where the backend reports none)."""
        return self.analysis.memory

    @property
    def collectives(self) -> list[dict[str, Any]]:
        """Collectives of the compiled program (with a mesh), ``crosses_hosts`` from the mesh."""
        from .targets import program_collectives

        return program_collectives(self.hlo, self.target)

    def summary(self) -> dict[str, Any]:
        """Headline figures: op counts before/after, kernels, fusions, folded, flops, times."""
        out: dict[str, Any] = {"name": self.name, "backend": self.backend}
        out.update(self.analysis.summary())
        for stage, seconds in self.timings.items():
            out[f"{stage}_seconds"] = seconds
        return out

    def diff(self, other: Compilation) -> Any:
        """What changed from ``other`` to this compilation: ops, fusions, costs, signature, and
        per-kernel / per-line time when both were profiled (``CompilationDiff``)."""
        from .comparison import diff_compilations

        return diff_compilations(other, self)

    # --- this run's results --------------------------------------------------------------------
    @property
    def notes(self) -> tuple[str, ...]:
        return tuple(self._notes)

    @property
    def changes(self) -> tuple[str, ...]:
        """What changed since the last run of this cell's target (empty when nothing did)."""
        return tuple(self._changes)

    @property
    def bench(self) -> Any | None:
        """:class:`nbcompile.measure.BenchResult` of ``--bench`` / :meth:`run_bench`."""
        return self._bench

    @property
    def ablation(self) -> Any | None:
        """:class:`nbcompile.measure.AblationResult` of ``--ablate`` / :meth:`run_ablation`."""
        return self._ablation

    @property
    def debug(self) -> Any | None:
        """:class:`nbcompile.debug.DebugResult` of ``--debug`` / :meth:`run_debug`."""
        return self._debug

    @property
    def frozen(self) -> Any | None:
        """What :meth:`freeze` / ``--freeze`` wrote (``FreezeResult``), else None."""
        return self._frozen

    @property
    def profile(self) -> Any | None:
        """The :class:`nbcompile.measure.Profile` of :meth:`run_profile` / ``--profile``."""
        return self._profile

    def add_note(self, note: str) -> None:
        if note and note not in self._notes:
            self._notes.append(note)

    def record_changes(self, changes: Sequence[str], since: Compilation | None = None) -> None:
        """What changed since the last run of this cell's target; ``since`` is that run, whose
        visual diff against this one the "what changed" card links to."""
        import weakref

        self._changes = list(changes)
        # weak: a run must not keep every earlier run of its cell alive through this link
        self._changes_diff = weakref.ref(since) if changes and since is not None else None

    def record_timing(self, stage: str, seconds: float) -> None:
        self._timings[stage] = float(seconds)

    def _require_runnable(self, what: str) -> None:
        if self.runnable:
            return
        from .errors import TargetError

        why = ("its example arguments are abstract (jax.ShapeDtypeStruct)"
               if self.target.present else f"it was compiled for {self.target.label}, "
               "which is not here")
        raise TargetError(f"cannot {what}: {why}", code="NBC210",
                          hint="compile with real arrays on a device that is present to measure")

    def run_bench(self, progress: Progress | None = None) -> Any:
        """Measure eager vs compiled calls, compile time and break-even (``--bench``)."""
        from .measure import bench

        self._require_runnable("benchmark")
        result = bench(self.original, self.args, kwargs=self.kwargs, compiled=self.fn,
                       compile_seconds=self._xla_compile_seconds(), progress=progress,
                       hlo=self.hlo)
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
            return stages.timings.get("trace", 0.0) + stages.timings.get("lower", 0.0) + \
                stages.timings["compile"]
        t0 = time.perf_counter()
        # a no-op debug option gives a fresh cache key, so XLA really compiles
        options = {**self.program.request.compiler_options, "xla_dump_max_hlo_modules": -1}
        stages.lowered.compile(compiler_options=options)
        compile_s = time.perf_counter() - t0
        self._timings["compile_measured"] = compile_s
        return stages.timings.get("trace", 0.0) + stages.timings.get("lower", 0.0) + compile_s

    def run_ablation(self, progress: Progress | None = None) -> Any:
        """Recompile with fusion / constant folding off and measure what each bought."""
        from .measure import ablate

        if progress:
            progress("ablating (recompiling without fusion / constant folding)")
        self._ablation = ablate(self.lowered, self.args, kwargs=self.kwargs,
                                time_it=self.runnable, platform=self.backend)
        return self._ablation

    def run_debug(self, progress: Progress | None = None) -> Any:
        """Run the traced program op by op, keeping every intermediate (``--debug``)."""
        from .debug import debug_run

        self._require_runnable("debug-run the program")
        if progress:
            progress("debugging (running op by op)")
        import jax

        compiled = jax.tree.leaves(self.fn(*self.args, **self.kwargs))  # the program itself
        self._debug = debug_run(self.jaxpr, (self.args, self.kwargs), source=self.source,
                                compiled_outputs=compiled, hlo=self.hlo)
        if self._debug.stopped:
            self.add_note(str(self._debug.error()))
        divergence = self._debug.divergence
        if divergence is not None and divergence.differs:
            self.add_note("the compiled program computes something different from its "
                          "op-by-op run: " + divergence.text().splitlines()[0])
        return self._debug

    def freeze(self, path: str, *, constants: bool = False,
               progress: Progress | None = None) -> Any:
        """Write the frozen single-file model with the *live* weights (``--freeze``)."""
        from .frozen import freeze as freeze_model

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
        self._frozen = freeze_model(fn, *args, path=path, weights_argnums=weights,
                                    constants=constants, name=self.name, reference_ops=reference)
        return self._frozen

    def run_profile(self, calls: int = 20) -> Any:
        """Measure where the time goes: ``calls`` calls under JAX's profiler (``--profile``)."""
        from .measure.profile import profile

        if self.target.present:  # deviceless targets get an estimate from XLA's cost model
            self._require_runnable("profile")
        self._profile = profile(self, calls=calls)
        return self._profile

    @property
    def memory_map(self) -> Any:
        """Where the bytes go at the peak, line by line; computed on first use (``--memory``)."""
        if self._memory_map is None:
            from .measure.memory import memory_map

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
        from .measure.memory_options import memory_options

        return memory_options(self, **options)

    # --- report and display ------------------------------------------------------------------
    @property
    def extras(self) -> Mapping[str, Any]:
        """What the report shows besides the analysis (bench, ablate, debug, freeze, target,
        changes, profile, memory), as JSON-ready dicts. Read-only."""
        out: dict[str, Any] = {}
        if not self.target.present or self.target.mesh is not None:
            out["target"] = self._target_json()
        for key, value in (("bench", self._bench), ("ablate", self._ablation),
                           ("debug", self._debug), ("freeze", self._frozen),
                           ("profile", self._profile), ("memory", self._memory_map)):
            if value is not None:
                out[key] = {**value.to_json(), "text": value.text()}
        if self._changes:
            out["changes"] = {"text": "\n".join(self._changes), "items": list(self._changes)}

        return MappingProxyType(out)

    def _target_json(self) -> dict[str, Any]:
        from .targets import target_summary

        return target_summary(self.target, self.placement, self.stages.output_shardings,
                              self.collectives)

    def _report_timings(self) -> dict[str, float]:
        """Timings the report shows: all but building and displaying the report itself."""
        return {k: v for k, v in self.timings.items() if k not in ("report", "display")}

    def _state_key(self) -> tuple[Any, ...]:
        results = (self._bench, self._ablation, self._debug, self._frozen, self._profile,
                   self._memory_map, self._changes_diff)
        return (tuple(id(r) for r in results), tuple(self._notes), tuple(self._changes),
                tuple(sorted(self._report_timings().items())))

    def report(self, progress: Progress | None = None) -> dict[str, Any]:
        """The JSON report every view reads (docs/report-schema.md); rebuilt only when this
        run's results, notes or timings change (re-displays are instant). ``progress`` is told
        each analysis stage, if the analysis runs now."""
        from .report import build_report

        self._analyse(progress)  # analyse first: it adds to the timings
        if self.grad is not None:  # counted as grad_analyse, not as report
            self.grad._analyse((lambda m: progress(f"{m} (gradient)")) if progress else None)
        key = self._state_key()
        if self._report is None or self._report[0] != key:
            t0 = time.perf_counter()
            report = build_report(
                self.analysis.to_json(), meta=self._meta(), extras=dict(self.extras),
                grad=self.grad.analysis.to_json() if self.grad is not None else None,
                node_values=self._debug_values(),
            )
            since = self._changes_diff() if self._changes_diff is not None else None
            if since is not None and "changes" in report["extras"]:
                from .comparison import diff_compilations

                # the "what changed" card links to the visual diff against the last run
                report["extras"]["changes"]["diff"] = diff_compilations(
                    since, self, after_report=report).view
            self._timings["report"] = time.perf_counter() - t0
            self._report = (self._state_key(), report)
        return self._report[1]

    def _meta(self) -> dict[str, Any]:
        return {
            "name": self.name, "backend": self.backend, "source": self.source.to_json(),
            "signature": self.signature, "options": self.options, "notes": list(self._notes),
            "timings": self._report_timings(), "cache_hit": self.cache_hit,
        }

    def _debug_values(self) -> dict[str, dict[str, Any]] | None:
        """Each traced-graph node's ``--debug`` value summary (None without ``--debug``)."""
        if self._debug is None:
            return None
        from .debug import equation_ids

        eqn_nodes = self.analysis.traced_graph.eqn_nodes
        values: dict[str, dict[str, Any]] = {}
        for debug_id, eqn in equation_ids(self.jaxpr):
            summary = self._debug.summaries.get(debug_id)
            node = eqn_nodes.get(id(eqn))
            if summary is not None and node is not None:
                value = {"id": debug_id, **(summary.get("outputs") or [{}])[0]}
                if self._debug.nan_at and self._debug.nan_at.get("id") == debug_id:
                    value["first_nan"] = True
                values[node] = value
        return values

    def save_html(self, path: str) -> str:
        """Write the whole view as one self-contained offline HTML file; returns the path."""
        from pathlib import Path

        from .widgets import static_page

        Path(path).write_text(static_page(self.report(), title=self.name), encoding="utf-8")
        return str(path)

    def to_dot(self, which: str = "traced") -> Any:
        """The ``traced`` / ``compiled`` / ``gradient`` graph as a ``graphviz.Digraph``."""
        from .report.dot import to_dot

        graph = self.report()["graphs"].get(which)
        if graph is None:
            raise ValueError(f"no {which!r} graph in this compilation")
        return to_dot(graph, name=f"{self.name}_{which}")

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        from .widgets import show

        t0 = time.perf_counter()
        report = self.report()
        self._shown = show(report, self._display, self._shown)
        self._timings.setdefault("display", time.perf_counter() - t0)
        return dict(self._shown.bundle)

    def __repr__(self) -> str:
        from .report import text_summary

        t0 = time.perf_counter()
        text = text_summary(self.report())
        self._timings.setdefault("display", time.perf_counter() - t0)
        return text


def _with_kwargs(fn: Callable[..., Any], kwargs: Mapping[str, Any]) -> Callable[..., Any]:
    """``fn(*args, **kwargs)`` as a function of positional arguments only (keyword values
    appended in order), for the frozen-file format, whose signature is positional."""
    names = list(kwargs)
    n = len(names)

    def positional(*values: Any) -> Any:
        return fn(*values[:-n], **dict(zip(names, values[-n:], strict=True)))

    positional.__name__ = getattr(fn, "__name__", "model")
    return positional


def _as_argnums(grad: Any) -> tuple[int, ...] | None:
    if grad is None or grad is False:
        return None
    if grad is True:
        return (0,)
    if isinstance(grad, int):
        return (grad,)
    return tuple(int(g) for g in grad)


def compile(
    fn: Callable[..., Any],
    *example_args: Any,
    backend: str | None = None,
    grad: int | Sequence[int] | bool | None = None,
    example_kwargs: dict[str, Any] | None = None,
    source: SourceInfo | None = None,
    name: str | None = None,
    progress: Progress | None = None,
    compiler_options: dict[str, Any] | None = None,
    topology: str | None = None,
    gpu: str | None = None,
    mesh: str | None = None,
    shard: dict[str, str] | None = None,
    **jit_kwargs: Any,
) -> Compilation:
    """Trace, lower and compile ``fn(*example_args)`` and return the :class:`Compilation`.

    ``grad`` (argnums, or True for 0 / a model's parameters) also compiles
    ``jax.value_and_grad(fn, argnums)`` for the Gradient view. ``jit_kwargs``
    (``static_argnames``, ``donate_argnames``, ...) go to ``jax.jit`` and take the names you
    wrote. ``backend`` (``cpu``/``gpu``/``tpu``), ``topology`` (``v5e:2x2``), ``gpu``
    (``h100``), ``mesh`` (``4x2``) and ``shard`` (``{"x": "data,None"}``) pick the hardware;
    absent devices are compiled for without them where the compiler is installed.
    Example arguments may be ``jax.ShapeDtypeStruct``\\ s: compile-only planning.
    """
    __tracebackhide__ = True
    adapted = adapt(fn, example_args, example_kwargs or {})
    request = CompileRequest(
        backend=backend, grad=_as_argnums(grad), grad_is_default=grad is True,
        topology=topology, gpu=gpu, mesh=mesh, shard=dict(shard or {}),
        jit_kwargs=dict(jit_kwargs), compiler_options=dict(compiler_options or {}),
    )
    program = build_program(
        adapted, request, source=source or source_of_function(adapted.fn, cells=cell_files()),
        name=name,
        progress=progress,
    )
    return Compilation(program, adapted)


def compare(*compilations: Compilation) -> Any:
    """The same model compiled for several targets: a side-by-side table (``.text()``) and,
    displayed, the visual diff of the first compilation against each other one."""
    from .comparison import compare_compilations
    from .targets import compare as compare_rows

    rows = []
    for c in compilations:
        label = c.target.label.upper().replace("CUDA", "GPU")
        rows.append((label, c.hlo, c.cost, c.memory))
    return compare_compilations(compare_rows(rows), *compilations)
