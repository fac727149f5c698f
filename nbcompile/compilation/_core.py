"""The ``Compilation`` type: one run over a compiled :class:`~nbcompile.pipeline.Program`.

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

from collections.abc import Callable, Sequence
from typing import Any

import jax

from ..capture.models import Adapted
from ..capture.source import SourceInfo
from ..errors import NbcompileError
from ..pipeline import Program, describe_args
from ..stages import Progress
from ._display import Display
from ._runs import Runs

__all__ = ["Compilation"]


def _runnable(program: Program, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    leaves = jax.tree_util.tree_leaves((args, kwargs))
    abstract = any(isinstance(leaf, jax.ShapeDtypeStruct) for leaf in leaves)
    return program.stages.target.present and program.stages.compiled is not None and not abstract


class Compilation(Runs, Display):
    """Everything one ``%%compile`` run / ``nbcompile.compile`` call produced.

    Figures a backend cannot give are ``None`` (documented per attribute), never faked.
    """

    __slots__ = (
        "__weakref__",
        "_ablation",
        "_bench",
        "_changes",
        "_changes_diff",
        "_compile_time",
        "_debug",
        "_display",
        "_dump_error",
        "_failures",
        "_frozen",
        "_memory_map",
        "_metal",
        "_notes",
        "_processes",
        "_profile",
        "_report",
        "_shown",
        "_timings",
        "adapted",
        "args",
        "cache_hit",
        "grad",
        "kwargs",
        "program",
        "runnable",
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
            if program.grad is not None
            else None
        )
        self._display = display
        self._notes: list[str] = []
        self._changes: list[str] = []
        self._changes_diff: Any = None
        self._timings: dict[str, float] = {}
        self._bench: Any = None
        self._ablation: Any = None
        self._debug: Any = None
        self._failures: dict[str, Any] = {}
        self._frozen: Any = None
        self._profile: Any = None
        self._processes: tuple[Any, ...] = ()  # per JAX process, where several compiled it
        self._memory_map: Any = None
        self._metal: Any = None  # XLA's dump of a compile of the program (measure/metal.py)
        self._compile_time: Any = None
        self._report: tuple[Any, dict[str, Any]] | None = None
        self._shown: Any = None
        self._dump_error: NbcompileError | None = None  # --passes: its dump was cut short
        if program.stages.dump is not None:  # --passes: read its compile's dump, remove it
            from ..measure.metal import read_stages_dump

            try:
                program.metal = read_stages_dump(program.stages)
            except NbcompileError as err:  # a full disk: compiled, without the dump (NBC610)
                self._dump_error = err
                self._notes.append(str(err))
        if program.stages.target.note:
            self._notes.append(program.stages.target.note)
        grad_notes = self.grad.notes if self.grad is not None else ()
        self._notes += [
            n for n in (*program.stages.notes, *program.notes, *grad_notes) if n not in self._notes
        ]
        if not self.runnable and program.stages.target.present and program.stages.compiled:
            self._notes.append(
                "compile-only: the example arguments are abstract "
                "(jax.ShapeDtypeStruct), so nothing was allocated or run"
            )

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
        ``run``, ``cache_lookup`` (the key of the lowered program, and the look-up),
        ``pipeline``, ``processes`` (the processes agreeing on the program, with several JAX
        processes), ``measure``, ``freeze``, ``bind``), the stages this run went through
        (``trace`` and ``lower`` on every run — the lowered program is the cache key —, and
        ``compile``, absent on a cache hit, which skipped XLA; ``grad_trace``... for
        ``--grad``'s program), the analyses this run computed
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
    def loops(self) -> list[Any]:
        """Every ``lax.scan`` / ``fori_loop`` / ``while_loop`` / ``lax.map`` of the program, in
        program order (:class:`nbcompile.analysis.loops.Loop`: kind, the user's line, call
        group, trip count, body kernels, nested loops, what XLA did to it)."""
        return list(self.analysis.loops)

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
        from .. import _compat
        from ..targets import program_collectives

        several = jax.process_count() > 1  # the program's own devices tell which processes
        devices = _compat.partition_devices(self.compiled) if several else None
        return program_collectives(self.hlo, self.target, devices)

    # --- down to the metal (XLA's dump of a compile of this program; docs/metal.md) ----------
    @property
    def passes(self) -> Any | None:
        """XLA's pass pipeline for this program (:class:`~nbcompile.analysis.passes_log.PassLog`),
        from XLA's dump of the program's own compile with ``--passes`` (``passes=True``), else
        from one more compile with the dump on (on first use); None where XLA dumped no
        passes (a note says why). NBC610 where XLA could not write its dump whole (a full
        disk)."""
        dump = self._metal_dump()
        if dump.passes is None and dump.no_passes:
            self.add_note(dump.no_passes)
        return dump.passes

    def run_passes(self, progress: Progress | None = None) -> Any | None:
        """Record XLA's pass pipeline now (``--passes``): read from the program's own compile
        when it wrote XLA's dump, else one more compile with the dump on. A dump cut short (a
        full disk, NBC610) is a note: the program compiled and runs without it."""
        if self._dump_error is not None and self._metal is None and self.program.metal is None:
            return None  # the program's own dump was cut short: the note says so, no retry
        if progress and self._metal is None and self.program.metal is None:
            progress("recording XLA's passes (one more compile)")
        try:
            return self.passes
        except NbcompileError as err:
            if err.code != "NBC610":
                raise
            self._dump_error = err
            self.add_note(str(err))
            return None

    def kernel_code(self, name: str) -> Any:
        """:class:`~nbcompile.measure.metal.KernelCode` of kernel ``name`` (as in
        :attr:`fusions`): LLVM IR, machine code, vector width, source locations. For a fusion
        XLA:CPU hands to a library (``ynn_fusion``) of element-wise ops or reductions, XLA's own
        code for the same ops from one more compile with the library off (``.library`` names
        the library that runs it; not what runs); dots and convolutions raise NBC600 naming
        the library and its kernels."""
        return self._kernel_code(name, compile_library_off=True)

    def _kernel_code(self, name: str, compile_library_off: bool) -> Any:
        """:meth:`kernel_code`; without ``compile_library_off`` a library fusion's stand-in
        code is given only when its compile was made already (the view compiles nothing)."""
        from ..measure.metal import kernel_code, libraries_off_dump

        dump = self._metal_dump()
        sites = self.analysis.kernel_sites.get(name) if isinstance(name, str) else None
        names = [f.name for f in self.fusions]
        locations = sites[1] if sites else []
        off = (
            (lambda: libraries_off_dump(self, dump))
            if compile_library_off
            else (lambda: dump.libraries_off)
        )
        return kernel_code(dump, name, locations, names, self.hlo, libraries_off=off)

    @property
    def compile_time(self) -> Any:
        """:class:`~nbcompile.analysis.compile_time.CompileTime`: where the compile time went
        (trace, lower, XLA passes, code generation; equations and trace time by line)."""
        if self._compile_time is None:
            from ..measure.metal import measured_compile_time

            self._compile_time = measured_compile_time(self, self._metal_dump())
        return self._compile_time

    def _metal_dump(self) -> Any:
        """XLA's dump of this program: the Program's own (``--passes``: its compile wrote it;
        kept on the Program, so a cache hit reuses it), else one more compile, once per run."""
        if self._metal is None:
            from ..measure.metal import dump_program

            metal = self.program.metal
            self._metal = metal if metal is not None else dump_program(self)
        return self._metal

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
        from ..comparison import diff_compilations

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

    @property
    def failures(self) -> dict[str, Any]:
        """The measurements of this run that failed, by option (``{"--profile": error}``);
        the others' results are kept. Empty when none failed."""
        return dict(self._failures)

    def record_failure(self, option: str, error: BaseException) -> None:
        self._failures[option] = error

    @property
    def processes(self) -> tuple[Any, ...]:
        """Per JAX process that compiled this program (multi-controller JAX, every process
        running the cell): ``index``, ``host``, ``devices`` (those it addresses) and
        ``fingerprint`` (:class:`nbcompile.processes.ProcessInfo`); ``()`` with one process."""
        return self._processes

    def record_processes(self, processes: Sequence[Any]) -> None:
        """Keep what the processes exchanged before binding (``nbcompile.processes``)."""
        self._processes = tuple(processes)

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
