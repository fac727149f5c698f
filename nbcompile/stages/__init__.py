"""Traced -> Lowered -> Compiled: the one compile path, for every target.

``run_stages`` takes a ``jax.jit`` object, arguments already placed on a resolved
:class:`~nbcompile.targets.Target` (see :func:`nbcompile.targets.place_args`) and runs JAX's AOT
stages: trace (Python ``print`` captured), lower (for the target's platform) —
:func:`lower_stages`, which every ``%%compile`` run pays, its program being the cache key
(``key.py``) — then compile (:func:`compile_stages`; skipped for lowered-only targets, and on
a cache hit; without JAX's persistent cache for deviceless ones). Errors are
translated to :class:`~nbcompile.errors.NbcompileError`\\ s naming the visible cell line and the
user's own argument names. The plain function, ``--grad``'s ``value_and_grad``, a mesh, a TPU
topology and the StableHLO-only fallback all go through here, so they cannot behave apart.

Each stage keeps the JAX object it wraps (``jax.stages.Traced`` / ``Lowered`` / ``Compiled``);
introspection a backend cannot give is ``None``, documented, never a crash.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import jax

from .. import _gc
from .._compat import (
    EarlyHlo,
    adopt_executable,
    captured_stderr,
    compile_fresh,
    key_persistent_cache_by_locations,
    persistent_cache_disabled,
    xla_dump_options,
)
from ..capture.calls import CallLog
from ..capture.calls import record_calls as _record_calls
from ..capture.source import SourceInfo, cell_identity
from ..targets import Placement, Target, output_shardings
from . import _dump, limits
from .errors import translate

__all__ = [
    "DUMP_OPTIONS",
    "Progress",
    "Stages",
    "XlaDump",
    "compile_stages",
    "lower_stages",
    "make_jitted",
    "recompile_with_metadata",
    "run_stages",
]

Progress = Callable[[str], None]


class _BackendCompiles(threading.local):
    """Seconds XLA spent in real backend compiles on this thread (cache hits add nothing)."""

    seconds: float = 0.0
    count: int = 0
    served: bool = False  # JAX's persistent cache served the compile timed next


_COMPILES = _BackendCompiles()


def _on_event(event: str, **_: Any) -> None:
    if event == "/jax/compilation_cache/cache_hits":
        _COMPILES.served = True


def _on_duration(event: str, duration: float, **_: Any) -> None:
    # JAX times a persistent-cache hit under the same event as a compile (JAX 0.10.2: the
    # hit is recorded first, inside the timed block, on the same thread)
    if event == "/jax/core/compile/backend_compile_duration":
        if _COMPILES.served:
            _COMPILES.served = False
            return
        _COMPILES.seconds += duration
        _COMPILES.count += 1


jax.monitoring.register_event_listener(_on_event)
jax.monitoring.register_event_duration_secs_listener(_on_duration)


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # nbcompile
# nbcompile's modules that start a trace (the same as nbcompile/analysis/lines.py's _CALLERS;
# tests/test_cache_program.py checks they agree)
_CALLERS = tuple(
    _PACKAGE + name for name in ("stages" + os.sep, "pipeline.py", "session.py", "magic.py")
)


def called_the_program(file: str) -> bool:
    """Whether a frame in ``file`` is one of those that called the traced program (nbcompile's
    tracing frames, and beyond them whatever called nbcompile): the view stops reading a call
    stack there (nbcompile/analysis/lines.py), and so does the cache key."""
    return file.startswith(_CALLERS)


# A persistent-cache hit must give what a fresh compile gives: the executable of *these* source
# lines (a cell's file by its content, so a new kernel still hits), and XLA's dumps when a compile
# asks for them (docs/guide.md, "What its key covers").
key_persistent_cache_by_locations(cell_identity, called_the_program)


#: XLA debug options of a compile that records its pass pipeline (``--passes``): every HLO
#: pass's module, the kernels' LLVM IR and objects (PTX on GPU), written to ``xla_dump_to``;
#: the full set per platform is ``_compat.xla_dump_options(platform)``
DUMP_OPTIONS = {"xla_dump_hlo_pass_re": ".*"}


def _dump_folder(notes: list[str]) -> tempfile.TemporaryDirectory[str] | None:
    """A temporary folder for XLA's dump of the program's own compile (``--passes``); None,
    with an NBC610 note, where none can be made (a full disk): the program then compiles
    without the dump."""
    try:
        return tempfile.TemporaryDirectory(prefix="nbcompile-dump-")
    except OSError as err:
        notes.append(str(_dump.dump_unwritable(err)))
        return None


@dataclass
class XlaDump:
    """The folder XLA's dump of the program's own compile went to (``run_stages(dump=True)``),
    removed with this object, and that compile's clock (seconds since the epoch, around
    ``Lowered.compile``); read by nbcompile/measure/metal.py."""

    folder: tempfile.TemporaryDirectory[str]
    started: float
    finished: float
    early: Any = None  # what ``compile_stages(watch_dump=...)`` made of the folder, stopped

    @property
    def path(self) -> str:
        return self.folder.name

    def remove(self) -> None:
        self.folder.cleanup()


@dataclass
class Stages:
    """The JAX stage objects of one compile, where it went, and how long each stage took.

    ``compiled`` is None for a lowered-only target (no compiler for that platform here).
    ``xla_compiles`` counts the real XLA compiles the compile stage ran (0 when JAX served the
    executable from its in-memory or persistent cache); ``xla_seconds`` is their duration.
    ``dump`` is XLA's dump of that compile when one was asked for (``--passes``), else None.
    """

    jitted: Any
    traced: Any
    lowered: Any
    compiled: Any | None
    target: Target
    placement: Placement
    timings: dict[str, float] = field(default_factory=dict)
    printed_at_trace: str = ""
    output_shardings: dict[str, str] = field(default_factory=dict)
    xla_compiles: int = 0
    xla_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    early_hlo: EarlyHlo | None = field(default=None, repr=False)  # converted beside XLA
    dump: XlaDump | None = field(default=None, repr=False)  # --passes: this compile's dump
    calls: CallLog = field(default_factory=CallLog, repr=False)  # the user's calls, as traced
    _text: tuple[Any, str | None] | None = field(default=None, repr=False)

    @property
    def closed_jaxpr(self) -> Any:
        return self.traced.jaxpr

    @property
    def hlo_text(self) -> str | None:
        """``compiled.as_text()`` (optimised HLO), printed once per executable; None when
        nothing was compiled or the backend prints no text (JAX documents ``None`` for that)."""
        if self.compiled is None:
            return None
        if self._text is None or self._text[0] is not self.compiled:
            self._text = (self.compiled, self.compiled.as_text())
        return self._text[1]


def make_jitted(
    fn: Callable[..., Any],
    *,
    grad_argnums: tuple[int, ...] | None = None,
    has_aux: bool = False,
    jit_kwargs: dict[str, Any] | None = None,
    compiler_options: dict[str, Any] | None = None,
) -> Any:
    """``jax.jit(fn)``, or ``jax.jit(jax.value_and_grad(fn, argnums, has_aux))`` with ``--grad``.

    ``compiler_options`` (XLA debug options such as ``xla_disable_hlo_passes``) go to
    ``jax.jit`` itself, so the compiled program and every later call of the jit object are the
    same program. JAX caches traces per *function object*: ``jax.jit(f)`` of an ``f`` traced
    before reuses that trace even when a global ``f`` reads has changed since. Compiling must see
    the live objects, so a plain function is traced through a fresh wrapper (same name,
    signature and ``__wrapped__``), and a ``fn`` that already is a ``jax.jit`` object (kept, with
    its own options: static arguments, donation, shardings) has its caches cleared first.
    """
    is_jit = hasattr(fn, "trace") and hasattr(fn, "lower")
    if grad_argnums is None and not jit_kwargs and not compiler_options and is_jit:
        fn.clear_cache()
        return fn
    target = _fresh(fn)
    if grad_argnums is not None:
        argnums = grad_argnums[0] if len(grad_argnums) == 1 else grad_argnums
        target = jax.value_and_grad(target, argnums=argnums, has_aux=has_aux)
    options = {**(jit_kwargs or {})}
    if compiler_options:
        options["compiler_options"] = dict(compiler_options)
    return jax.jit(target, **options)


def _fresh(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A new function object calling ``fn`` (see :func:`make_jitted`)."""

    @functools.wraps(fn)
    def traced(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return traced


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


def _native_noise(target: Target) -> contextlib.AbstractContextManager[Any]:
    """libtpu / the CUDA plugin print to fd 2 from C++ when compiling without the device."""
    return captured_stderr() if target.platform != "cpu" else contextlib.nullcontext()


def _timed(timings: dict[str, float], stage: str) -> Any:
    @contextlib.contextmanager
    def block() -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            timings[stage] = time.perf_counter() - t0

    return block()


def run_stages(
    jitted: Any,
    placement: Placement,
    target: Target,
    *,
    source: SourceInfo | None = None,
    arg_names: list[str] | None = None,
    progress: Progress | None = None,
    dump: bool = False,
    beside_compile: Callable[[Any, Any, str], Any] | None = None,
    watch_dump: Callable[[str], Any] | None = None,
) -> Stages:
    """Trace, lower and compile ``jitted(*placement.args, **placement.kwargs)`` for ``target``:
    :func:`lower_stages` then :func:`compile_stages` (see both)."""
    __tracebackhide__ = True
    stages = lower_stages(
        jitted, placement, target, source=source, arg_names=arg_names, progress=progress
    )
    return compile_stages(
        stages,
        source=source,
        arg_names=arg_names,
        progress=progress,
        dump=dump,
        beside_compile=beside_compile,
        watch_dump=watch_dump,
    )


def _where(target: Target) -> str:
    return "" if target.present and target.platform == "cpu" else f" for {target.label}"


def lower_stages(
    jitted: Any,
    placement: Placement,
    target: Target,
    *,
    source: SourceInfo | None = None,
    arg_names: list[str] | None = None,
    progress: Progress | None = None,
    record_calls: bool = True,
) -> Stages:
    """Trace and lower ``jitted(*placement.args, **placement.kwargs)`` for ``target``: the
    :class:`Stages` without ``compiled`` (what every ``%%compile`` run pays; its program is the
    cache key, nbcompile/stages/key.py). Python ``print`` at trace time is captured
    (``printed_at_trace``), the user's calls recorded (``calls``) unless ``record_calls`` is
    False (a look-up's trace: the same program without the call paths in its names).

    Raises :class:`~nbcompile.errors.TraceError` or ``LowerError`` naming the visible cell line
    (from ``source``), the user's argument names (``arg_names``) and what to do; JAX's error is
    chained.
    """
    __tracebackhide__ = True
    source = source or SourceInfo()
    timings: dict[str, float] = {}
    say = progress or (lambda _msg: None)
    where = _where(target)

    say(f"tracing{where}")
    try:
        recording = _record_calls() if record_calls else contextlib.nullcontext(CallLog())
        # the collector paused: the trace's objects die with it (see nbcompile/_gc.py)
        with (
            _timed(timings, "trace"),
            _gc.paused(),
            _capture_stdout() as printed,
            recording as calls,
        ):
            traced = jitted.trace(*placement.args, **placement.kwargs)
    except Exception as exc:
        raise translate(exc, "trace", source, arg_names=arg_names, target=target.label) from exc

    say(f"lowering{where}")
    platforms = (target.platform,) if target.lower_only else None
    try:
        with _timed(timings, "lower"), _gc.paused(), _native_noise(target):
            lowered = traced.lower(lowering_platforms=platforms)
    except Exception as exc:
        raise translate(exc, "lower", source, arg_names=arg_names, target=target.label) from exc
    return Stages(
        jitted=jitted,
        traced=traced,
        lowered=lowered,
        compiled=None,
        target=target,
        placement=placement,
        timings=timings,
        printed_at_trace=printed.getvalue(),
        calls=calls,
    )


def compile_stages(
    stages: Stages,
    *,
    source: SourceInfo | None = None,
    arg_names: list[str] | None = None,
    progress: Progress | None = None,
    dump: bool = False,
    beside_compile: Callable[[Any, Any, str], Any] | None = None,
    watch_dump: Callable[[str], Any] | None = None,
) -> Stages:
    """Compile what :func:`lower_stages` lowered (nothing for a lowered-only target), filling
    ``stages`` in (``compiled``, the ``compile`` timing, XLA's compile count) and returning it.

    ``dump`` (``--passes``): the compile itself writes XLA's dump (``xla_dump_to`` a temporary
    folder, :data:`DUMP_OPTIONS`) without JAX's persistent cache (a cache hit would run no XLA
    and dump nothing), so the pass pipeline and the kernels' code need no second compile
    (``Stages.dump``). The executable is the same (dump options change no code) and becomes the
    one later calls of ``jitted`` run (:func:`~nbcompile._compat.adopt_executable`).

    ``beside_compile(closed_jaxpr, calls, pre_optimisation_text)`` (optional) is analysis work
    that needs no compile: run in :class:`~nbcompile._compat.EarlyHlo`'s thread
    while XLA compiles, if there is time; ``Stages.early_hlo.beside()`` gives its result.
    ``watch_dump(folder)`` (optional, with ``dump``) starts reading the dump while XLA writes
    it; what it returns is stopped (``.stop()``) when the compile returns, and kept as
    ``Stages.dump.early``.

    Raises :class:`~nbcompile.errors.CompileError` naming the visible cell line and what to do.
    """
    __tracebackhide__ = True
    source = source or SourceInfo()
    say = progress or (lambda _msg: None)
    target, traced, lowered = stages.target, stages.traced, stages.lowered
    # sizes and chains XLA's compiler would crash on, checked here: lowering them is safe
    # (measured on JAX 0.10.2 and 0.12: a 2**62-element array and a 30,000-op chain lower), and
    # a cache hit, the same program as one checked when it compiled, pays nothing (~10 ms at
    # GPT-2 size)
    limits.check_program(traced.jaxpr)
    where = _where(target)
    compiled = None
    outputs: dict[str, str] = {}
    notes: list[str] = []
    before = (_COMPILES.count, _COMPILES.seconds)
    early = None
    written: XlaDump | None = None
    if not target.lower_only:
        say(f"compiling{where}")
        fresh = target.deviceless or dump
        cache = persistent_cache_disabled() if fresh else contextlib.nullcontext()
        started = time.perf_counter()
        try:
            with _timed(stages.timings, "compile"), _native_noise(target), cache:
                then = (
                    functools.partial(beside_compile, traced.jaxpr, stages.calls)
                    if beside_compile is not None
                    else None
                )
                early = EarlyHlo(lowered, then=then)
                try:
                    folder = _dump_folder(notes) if dump else None
                    if folder is not None:
                        options = {"xla_dump_to": folder.name, **xla_dump_options(target.platform)}
                        watcher = watch_dump(folder.name) if watch_dump is not None else None
                        clock = time.time()
                        try:
                            compiled = lowered.compile(compiler_options=options)
                        finally:
                            if watcher is not None:
                                watcher.stop()
                        written = XlaDump(folder, clock, time.time(), early=watcher)
                        adopt_executable(lowered, compiled)
                    else:
                        compiled = lowered.compile()
                finally:
                    early.compile_done()
        except KeyboardInterrupt as exc:
            raise _interrupted_compile(target, time.perf_counter() - started) from exc
        except jax.errors.JaxRuntimeError as exc:
            if not (target.deviceless and "RESOURCE_EXHAUSTED" in str(exc)):
                raise translate(
                    exc, "compile", source, arg_names=arg_names, target=target.label
                ) from exc
            # XLA refused the program for lack of device memory: keep what was lowered, so
            # the memory map can say what does not fit and why (it maps the lowered program)
            notes.append(
                f"XLA refused to compile for {target.label}: the program needs more "
                f"device memory than one device has ({_first_line(exc)[:200]}); "
                "see the memory map"
            )
        except Exception as exc:
            raise translate(
                exc, "compile", source, arg_names=arg_names, target=target.label
            ) from exc
        if target.mesh is not None and compiled is not None:
            outputs, shapes = output_shardings(compiled, traced.out_info)
            stages.placement.per_device_shapes.update(shapes)
    stages.compiled = compiled
    stages.output_shardings = outputs
    stages.xla_compiles = _COMPILES.count - before[0]
    stages.xla_seconds = _COMPILES.seconds - before[1]
    stages.notes = notes
    stages.early_hlo = early
    stages.dump = written
    return stages


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _interrupted_compile(target: Target, seconds: float) -> Exception:
    from ..errors import CompileError

    return CompileError(
        f"interrupted after {seconds:.1f} s of XLA compiling for {target.label}: nothing was "
        "bound or changed, but XLA cannot stop a compile it has started — it finishes in the "
        "background (both cores stay busy), and the next compile in this kernel waits for it",
        code="NBC209",
        hint="let it finish (the kernel stays usable meanwhile), or restart the kernel to stop it",
    )


def recompile_with_metadata(stages: Stages, compiler_options: dict[str, Any] | None = None) -> bool:
    """If the executable carries no source metadata, compile it afresh (True if it did).

    Executables restored from JAX's persistent cache keep the metadata of the process that
    first compiled them (cell files then match by content: see ``SourceInfo.is_cell_file``);
    one without any metadata could not be mapped back to cell lines at all.
    """
    text = stages.hlo_text
    if stages.compiled is None or text is None or "metadata={" in text:
        return False
    t0 = time.perf_counter()
    # XLA must really compile again (JAX's caches would serve the same executable)
    stages.compiled = compile_fresh(stages.lowered, compiler_options)
    stages.timings["analyse.recompile"] = time.perf_counter() - t0  # part of the analysis
    return True
