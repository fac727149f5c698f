"""Run one ``%%compile`` cell: capture, compile (or reuse), measure, freeze, bind, record.

This is the whole behaviour of the magic without IPython: the magic parses options, hands the
cell, the user namespace and the cell's file name to :meth:`Session.run_cell`, and displays what
comes back. Names are committed to the namespace only when everything succeeded.

All per-kernel state lives on the :class:`Session` (one per IPython shell): the compile cache,
the recompile history, the display state, the last compilation and the last error. Plain Python
use (no shell) gets one process-wide session.
"""

from __future__ import annotations

import sys
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jax

from . import _gc
from .cache import CompilationCache, program_key
from .capture.cell import (
    Captured,
    capture,
    defined_in,
    evaluate_call,
    restore,
    run_body,
    snapshot,
    store_line,
)
from .capture.models import Adapted, adapt
from .compilation import Compilation, _as_argnums
from .errors import NbcompileError, TraceError
from .history import History
from .pipeline import (
    CompileRequest,
    LoweredProgram,
    compile_program,
    lower_program,
    relocate_program,
)
from .processes import agree
from .widgets import DisplayState

__all__ = ["CellOptions", "CellResult", "Session", "current_session", "last", "last_error"]

Progress = Callable[[str], None]


@dataclass
class CellOptions:
    """The parsed ``%%compile`` options (see ``%%compile?``). ``fn`` is the TARGET callable's
    expression; ``gpu`` the GPU model of ``--target``."""

    fn: str | None = None
    backend: str | None = None
    grad: tuple[int, ...] | None = None
    freeze: str | None = None
    freeze_constants: bool = False
    bench: bool = False
    ablate: bool = False
    debug: bool = False
    profile: int | None = None
    memory: bool = False
    passes: bool = False
    mesh: str | None = None
    shard: dict[str, str] = field(default_factory=dict)
    topology: str | None = None
    gpu: str | None = None
    static: list[str] = field(default_factory=list)
    donate: list[str] = field(default_factory=list)
    args_expr: str | None = None
    force: bool = False
    quiet: bool = False
    line: str = ""

    def request(self) -> CompileRequest:
        """The compile options (what shapes the program), for the pipeline and the cache."""
        jit: dict[str, Any] = {}
        if self.static:
            jit["static_argnames"] = tuple(self.static)
        if self.donate:
            jit["donate_argnames"] = tuple(self.donate)
        return CompileRequest(
            backend=self.backend,
            grad=_as_argnums(self.grad),
            topology=self.topology,
            gpu=self.gpu,
            mesh=self.mesh,
            shard=dict(self.shard),
            jit_kwargs=jit,
        )

    def compile_key(self) -> str:
        """The options that change the compiled program (not display or measurement ones)."""
        parts = [
            self.fn,
            self.backend,
            self.grad,
            self.mesh,
            sorted(self.shard.items()),
            self.topology,
            self.gpu,
            self.static,
            self.donate,
            self.args_expr,
        ]
        return repr(parts)

    def describe(self) -> str:
        """The program-changing options as the user wrote them, for the 'what changed' card."""
        parts = []
        for flag, value in (
            ("--backend", self.backend),
            ("--topology", self.topology),
            ("--target", self.gpu),
            ("--mesh", self.mesh),
            ("--static", ",".join(self.static)),
            ("--donate", ",".join(self.donate)),
            ("--args", self.args_expr),
        ):
            if value:
                parts.append(f"{flag} {value}")
        if self.grad is not None:
            parts.append("--grad " + ",".join(map(str, self.grad)))
        parts += [f"--shard {k}={v}" for k, v in sorted(self.shard.items())]
        return " ".join(parts)


@dataclass
class CellResult:
    compilation: Compilation
    captured: Captured
    bound: list[str]
    cache_hit: bool
    changes: list[str]
    warnings: list[str]


def _tracers_in(namespace: dict[str, Any]) -> dict[str, set[int]]:
    """The tracers each global holds (itself, or among a list/tuple/dict's first 1,000 values)."""
    tracer = jax.core.Tracer
    skip = {"In", "Out", "_oh", "_ih", "_dh", "_", "__", "___"}
    found: dict[str, set[int]] = {}
    for name, value in namespace.items():
        if name in skip or name.startswith("_i"):
            continue
        values = [value]
        if isinstance(value, list | tuple):
            values = list(value)[:1000]
        elif isinstance(value, dict):
            values = list(value.values())[:1000]
        ids = {id(v) for v in values if isinstance(v, tracer)}
        if ids:
            found[name] = ids
    return found


def _leaked_tracers(namespace: dict[str, Any], before: dict[str, set[int]]) -> list[str]:
    """Globals holding a tracer this trace stored: one left by an earlier failed cell (the
    user's list still holds it) is not this cell's mistake and must not fail every later cell."""
    return [name for name, ids in _tracers_in(namespace).items() if ids - before.get(name, set())]


class _Clock:
    """Seconds per step of one cell, handed to the Compilation at the end."""

    def __init__(self) -> None:
        self.steps: dict[str, float] = {}
        self._t = time.perf_counter()

    def lap(self, step: str) -> None:
        now = time.perf_counter()
        self.steps[step] = self.steps.get(step, 0.0) + now - self._t
        self._t = now


def unlink_evicted(program: Any) -> None:
    """Cut the link between a program the cell cache let go of and its last run, when nothing
    else holds either.

    A bound run and its program hold each other (``f.compilation`` is the run; the run's
    program's stages hold ``f``): a cycle, which only the cyclic collector frees, and a busy
    session's full collections come dozens of cells apart. So evicted programs, each with its
    executable and analysis (~0.3 MB for a one-line function), waited as garbage in the
    meantime, and the heap grew to hold them (the growth benchmark: ~300 KB more per cell over
    cells 100-200). Cut here, the reference counts free the program at once. Only where it
    cannot be seen: the jitted function is held by the stages alone (not by the user's
    namespace or any other name) and the run by the jitted function alone (not by ``_``,
    ``Out``, ``nbcompile.last()`` or a variable); otherwise the collector frees them when
    they are let go. The reference counts are compared with those of an object held the same
    way (one holder and one local name), not with a number: what ``getrefcount`` adds for its
    own argument changes between CPython versions (checked on 3.11 and 3.13).
    """
    jitted = getattr(getattr(program, "stages", None), "jitted", None)
    run = getattr(jitted, "compilation", None)
    if run is None or getattr(run, "program", None) is not program:
        return
    probe = _Probe()
    holder = [probe]  # like the stages holding jitted, and jitted's attribute holding run
    alone = sys.getrefcount(probe)
    if sys.getrefcount(jitted) == alone and sys.getrefcount(run) == alone:
        del jitted.compilation
    del holder


class _Probe:
    """An object held once, to read what one holder and one local name count to."""


class Session:
    """State kept across cells of one kernel (see the module docstring)."""

    def __init__(self) -> None:
        self.cache = CompilationCache(on_evict=unlink_evicted)
        self.history = History()
        self.display = DisplayState()
        self.last: Compilation | None = None
        self.last_error: BaseException | None = None
        # the last run of each target, for the visual diff its next changed run links to
        self._previous: dict[str, weakref.ref[Compilation]] = {}

    def run_cell(
        self,
        cell: str,
        options: CellOptions,
        namespace: dict[str, Any],
        filename: str,
        progress: Progress | None = None,
        cell_id: str | None = None,
        cells: Mapping[str, int] | None = None,
    ) -> CellResult:
        __tracebackhide__ = True
        clock = _Clock()
        captured = capture(
            cell,
            filename,
            magic_line=options.line,
            fn=options.fn,
            args_expr=options.args_expr,
            cells=cells,
        )
        if progress is not None and hasattr(progress, "name"):
            progress.name = captured.fn_expr  # the progress line names what compiles
        before = snapshot(namespace)
        clock.lap("capture")
        try:
            return self._run(captured, options, namespace, progress, clock, cell_id)
        except KeyboardInterrupt as exc:
            restore(namespace, before)
            raise TraceError(
                "interrupted (before XLA compiled anything): nothing was bound or changed",
                code="NBC209",
                line=captured.call_line,
                hint="run the cell again when ready",
            ) from exc
        except BaseException:
            restore(namespace, before)
            raise

    def _run(
        self,
        captured: Captured,
        options: CellOptions,
        namespace: dict[str, Any],
        progress: Progress | None,
        clock: _Clock,
        cell_id: str | None,
    ) -> CellResult:
        __tracebackhide__ = True
        run_body(captured, namespace)
        fn, args, kwargs = evaluate_call(captured, namespace)
        adapted = adapt(fn, args, kwargs)
        clock.lap("run")
        # The collector paused from the trace on (nbcompile/_gc.py): a re-run's trace and
        # lowering, dropped on a cache hit, are freed when _program returns, before it resumes;
        # running, they would be promoted and set off a full collection of the heap (~300 ms at
        # GPT-2 size, every other re-run). The user's own code above (run_body) runs with it on.
        with _gc.paused():
            return self._program(
                captured, options, namespace, progress, clock, cell_id, fn, adapted
            )

    def _program(
        self,
        captured: Captured,
        options: CellOptions,
        namespace: dict[str, Any],
        progress: Progress | None,
        clock: _Clock,
        cell_id: str | None,
        fn: Any,
        adapted: Adapted,
    ) -> CellResult:
        __tracebackhide__ = True
        body = "\n".join(captured.source.lines[1:])  # the %%compile line is in compile_key()
        compile_key = options.compile_key()
        request = options.request()
        warnings: list[str] = []

        def lower(record: bool) -> LoweredProgram:
            # every run traces and lowers: the program is the cache key (SPEC §9.2)
            tracers_before = _tracers_in(namespace)
            lowered = lower_program(
                adapted,
                request,
                source=captured.source,
                name=captured.fn_expr,
                progress=progress,
                record_calls=record,
            )
            self._check_trace_side_effects(
                lowered, captured, namespace, tracers_before, warnings, show=not warnings
            )
            return lowered

        # A cell run before is traced first without recording the user's calls (a fifth of a
        # trace's time, needed only by a new program's view): the key is the same program's.
        probe = not options.force and self.cache.knows(body, compile_key)
        lowered = lower(record=not probe)
        clock.lap("compile")
        key = program_key(lowered.lowered, cell=body, options=compile_key)
        program = None if options.force else self.cache.get(key)
        probed: tuple[Any, LoweredProgram] | None = None
        if program is None and probe:
            probed = (key, lowered)  # a new program: traced again, recording the calls
            lowered = lower(record=True)
            key = program_key(lowered.lowered, cell=body, options=compile_key)
            program = self.cache.get(key)  # recorded by an earlier run, not probed yet
        same = None
        if program is None and not options.force and not options.passes:
            same = self.cache.same_executable(key)
        clock.lap("cache_lookup")
        # the same program with its code elsewhere: XLA's executable, this run's lines
        relocated = relocate_program(lowered, same) if same is not None else None
        if relocated is not None:
            program = relocated
            program.notes += lowered.misnumbered()
            comp = Compilation(program, adapted, cache_hit=True, display=self.display)
            comp.add_note(
                "XLA skipped: the same program as an earlier run, its code in other places; "
                "the executable is reused, its lines read from this run's program"
            )
            for run, stages in ((comp, lowered.stages), (comp.grad, lowered.grad_stages)):
                if run is not None and stages is not None:
                    for step in ("trace", "lower", "relocate"):
                        run.record_timing(step, stages.timings.get(step, 0.0))
            self.cache.put(key, program)
        elif program is None:
            program = compile_program(lowered, progress=progress, passes=options.passes)
            program.notes += lowered.misnumbered()
            comp = Compilation(program, adapted, display=self.display)
            self.cache.put(key, program)
        else:
            program.refresh_locations()
            comp = Compilation(program, adapted, cache_hit=True, display=self.display)
            # what this run paid, though XLA was skipped: its own trace and lowering
            for run, stages in ((comp, lowered.stages), (comp.grad, lowered.grad_stages)):
                if run is not None and stages is not None:
                    for step in ("trace", "lower"):
                        run.record_timing(step, stages.timings.get(step, 0.0))
        if probed is not None:
            self.cache.alias(probed[0], key)  # the next probe finds it
            for step in ("trace", "lower"):  # spent in the look-up, not by the program
                seconds = sum(s.timings.get(step, 0.0) for s in probed[1].lowered_stages)
                comp.record_timing(f"cache_lookup.probe_{step}", seconds)
            probed[0].release()
        key.complete()  # the history compares programs (a hit found by the exact digest has it)
        key.release()
        clock.lap("compile")
        # several JAX processes: the same program on each, checked before anything runs
        if agree(comp, captured.source, seed=body + options.compile_key(), freeze=options.freeze):
            clock.lap("processes")
        warnings += self._measure(comp, options, progress)
        if options.debug and comp.debug is not None and comp.debug.stopped:
            warnings.append(str(comp.debug.error()))
        clock.lap("measure")
        if options.freeze:
            comp.freeze(options.freeze, constants=options.freeze_constants, progress=progress)
            clock.lap("freeze")
        changes, repeat = self.history.record(
            captured,
            comp,
            options.describe(),
            key,
            compiled=not comp.cache_hit,
            cell_id=cell_id,
        )
        if repeat:
            warnings.append(repeat)
        ref = self._previous.get(captured.fn_expr)
        comp.record_changes(changes, since=ref() if ref is not None and changes else None)
        self._previous[captured.fn_expr] = weakref.ref(comp)
        for warning in warnings:
            comp.add_note(warning)
        bound = self._bind(captured, comp, fn, namespace)
        clock.lap("bind")
        stage_seconds = sum(
            v
            for k, v in comp.timings.items()
            if k.removeprefix("grad_") in ("trace", "lower", "compile", "relocate")
        )
        clock.steps["pipeline"] = max(clock.steps.pop("compile") - stage_seconds, 0.0)
        for step, seconds in clock.steps.items():
            comp.record_timing(step, seconds)
        self.last = comp
        return CellResult(comp, captured, bound, comp.cache_hit, changes, warnings)

    @staticmethod
    def _check_trace_side_effects(
        lowered: LoweredProgram,
        captured: Captured,
        namespace: dict[str, Any],
        tracers_before: dict[str, set[int]],
        warnings: list[str],
        *,
        show: bool = True,
    ) -> None:
        """What this run's trace did besides tracing (every run traces, hit or not); a second
        trace of the same run (``show`` False) prints nothing again."""
        leaked = _leaked_tracers(namespace, tracers_before)
        if leaked:
            raise TraceError(
                f"a traced value was stored in the global `{leaked[0]}` while tracing",
                code="NBC204",
                line=store_line(captured.source, leaked[0]) or captured.call_line,
                hint="return it from the function instead of assigning a global",
            )
        printed = lowered.printed_at_trace
        if printed and show:
            print(printed, end="" if printed.endswith("\n") else "\n")
            warnings.append(
                "print() ran once, at trace time, and printed tracers, not values: "
                "use jax.debug.print(...) to print values on every call"
            )

    @staticmethod
    def _measure(comp: Compilation, options: CellOptions, progress: Progress | None) -> list[str]:
        """Measurements are not part of the cache key: a cache hit still runs those asked for,
        on the live arguments. Each part is independent: one that fails leaves the others'
        results on ``comp`` and is named in the returned warnings (``comp.failures`` keeps its
        error); only when every part asked for failed does the cell fail, with the first error.
        """

        def profile() -> None:
            if progress:
                progress(f"profiling ({options.profile} calls)")
            comp.run_profile(calls=options.profile)

        def memory() -> None:
            if progress:
                progress("mapping memory")
            comp.memory_map  # noqa: B018 - computed now, shown in the view

        parts = [
            ("--bench", options.bench, lambda: comp.run_bench(progress)),
            ("--ablate", options.ablate, lambda: comp.run_ablation(progress)),
            ("--debug", options.debug, lambda: comp.run_debug(progress)),
            ("--profile", bool(options.profile), profile),
            ("--memory", options.memory, memory),
            ("--passes", options.passes, lambda: comp.run_passes(progress)),
        ]
        asked = [(flag, run) for flag, wanted, run in parts if wanted]
        failed: list[NbcompileError] = []
        for flag, run in asked:
            try:
                run()
            except NbcompileError as err:
                failed.append(err)
                comp.record_failure(flag, err)
        if failed and len(failed) == len(asked):
            raise failed[0]
        return [
            f"{flag} failed, the other results are kept: {err}"
            for flag, err in comp.failures.items()
        ]

    @staticmethod
    def _bind(
        captured: Captured, comp: Compilation, fn: Any, namespace: dict[str, Any]
    ) -> list[str]:
        """Rebind a cell-defined function to its compiled jit object (models stay as they are;
        programs for a device that is not here, or compile-only ones, keep the function)."""
        name = captured.fn_name
        if name is None or namespace.get(name) is not fn:
            return []
        if not comp.adapted.rebindable or not comp.runnable:
            return []
        if not defined_in(fn, captured.source.filename):
            return []
        jitted = comp.fn
        try:
            jitted.compilation = comp
        except AttributeError:
            return []
        namespace[name] = jitted
        return [name]


_PROCESS_SESSION = Session()


def current_session() -> Session:
    """The session of the IPython shell running now (``%load_ext nbcompile``), else the
    process-wide one used by plain Python."""
    from . import _compat

    session = _compat.extension_session()
    return session if session is not None else _PROCESS_SESSION


def last() -> Compilation | None:
    """The Compilation of the last successful ``%%compile`` cell (also with ``-q`` or ``;``)."""
    return current_session().last


def last_error() -> BaseException | None:
    """The last nbcompile error shown in this kernel, with JAX's error as ``__cause__``."""
    return current_session().last_error
