"""Run one ``%%compile`` cell: capture, compile (or reuse), bind, record history.

This is the whole behaviour of the magic without IPython: the magic parses options, hands the
cell, the user namespace and the cell's file name to :meth:`Session.run_cell`, and displays what
comes back. Names are committed to the namespace only when everything succeeded.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax

from .cache import CompilationCache, cell_key
from .capture.cell import Captured, capture, defined_in, evaluate_call, restore, run_body, snapshot
from .compilation import Compilation, compile
from .errors import TraceError
from .history import History

__all__ = ["CellOptions", "CellResult", "Session", "last"]

_LAST: Compilation | None = None


def last() -> Compilation | None:
    """The Compilation of the last successful ``%%compile`` cell (also with ``-q`` or ``;``)."""
    return _LAST


@dataclass
class CellOptions:
    """The parsed ``%%compile`` options (see ``%%compile?``)."""

    target: str | None = None
    backend: str | None = None
    grad: tuple[int, ...] | None = None
    freeze: str | None = None
    freeze_constants: bool = False
    bench: bool = False
    ablate: bool = False
    debug: bool = False
    mesh: str | None = None
    shard: dict[str, str] = field(default_factory=dict)
    topology: str | None = None
    gpu_target: str | None = None
    static: list[str] = field(default_factory=list)
    donate: list[str] = field(default_factory=list)
    args_expr: str | None = None
    force: bool = False
    quiet: bool = False
    line: str = ""

    def jit_kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.static:
            out["static_argnames"] = tuple(self.static)
        if self.donate:
            out["donate_argnames"] = tuple(self.donate)
        return out

    def compile_key(self) -> str:
        """The options that change the compiled program (not display or measurement ones)."""
        parts = [self.target, self.backend, self.grad, self.mesh, sorted(self.shard.items()),
                 self.topology, self.gpu_target, self.static, self.donate, self.args_expr]
        return repr(parts)

    def describe(self) -> dict[str, str]:
        """Option -> value for the 'what changed' card."""
        tokens = shlex.split(self.line) if self.line else []
        flags = [t for t in tokens if t.startswith("-") and t not in ("-f", "--force")]
        return {"options": " ".join(flags)}


@dataclass
class CellResult:
    compilation: Compilation
    captured: Captured
    bound: list[str]
    cache_hit: bool
    changes: list[str]
    warnings: list[str]


def _leaked_tracers(namespace: dict[str, Any]) -> list[str]:
    tracer = jax.core.Tracer
    skip = {"In", "Out", "_oh", "_ih", "_dh", "_", "__", "___"}
    found = []
    for name, value in namespace.items():
        if name in skip or name.startswith("_i"):
            continue
        values = [value]
        if isinstance(value, list | tuple):
            values = list(value)[:1000]
        elif isinstance(value, dict):
            values = list(value.values())[:1000]
        if any(isinstance(v, tracer) for v in values):
            found.append(name)
    return found


class Session:
    """State kept across cells of one kernel: the compile cache and the recompile history."""

    def __init__(self) -> None:
        self.cache = CompilationCache()
        self.history = History()

    def run_cell(
        self,
        cell: str,
        options: CellOptions,
        namespace: dict[str, Any],
        filename: str,
        progress: Callable[[str], None] | None = None,
    ) -> CellResult:
        __tracebackhide__ = True
        captured = capture(cell, filename, magic_line=options.line, target=options.target,
                           args_expr=options.args_expr)
        if progress is not None and hasattr(progress, "name"):
            progress.name = captured.target_expr  # the progress line names what compiles
        before = snapshot(namespace)
        try:
            return self._run(captured, options, namespace, progress)
        except BaseException:
            restore(namespace, before)
            raise

    def _run(
        self, captured: Captured, options: CellOptions, namespace: dict[str, Any],
        progress: Callable[[str], None] | None,
    ) -> CellResult:
        __tracebackhide__ = True
        run_body(captured, namespace)
        target, args, kwargs = evaluate_call(captured, namespace)
        body = "\n".join(captured.source.lines[1:])  # the %%compile line is in compile_key()
        key = cell_key(source=body, options=options.compile_key(),
                       target=target, args=args, kwargs=kwargs,
                       backend=options.backend or jax.default_backend())
        cached = None if options.force else self.cache.get(key)
        warnings: list[str] = []
        if cached is not None:
            comp = cached
        else:
            comp = compile(
                target, *args, example_kwargs=kwargs, backend=options.backend,
                grad=options.grad, source=captured.source, progress=progress,
                name=captured.target_expr, topology=options.topology, target=options.gpu_target,
                mesh=options.mesh, shard=options.shard or None, **options.jit_kwargs(),
            )
            leaked = _leaked_tracers(namespace)
            if leaked:
                raise TraceError(
                    f"a traced value was stored in the global `{leaked[0]}` while tracing",
                    code="NBC204", line=captured.target_line,
                    hint="return it from the function instead of assigning a global",
                )
            printed = comp.stages.printed_at_trace
            if printed:
                print(printed, end="" if printed.endswith("\n") else "\n")
                warnings.append(
                    "print() ran once, at trace time, and printed tracers, not values: "
                    "use jax.debug.print(...) to print values on every call"
                )
            self.cache.put(key, comp)
        # measurements are not part of the cache key: a cache hit still runs the ones asked for
        self._measure(comp, options, progress)
        debug = getattr(comp, "debug", None)
        if options.debug and debug is not None and debug.stopped:
            warnings.append(str(debug.error()))
        if options.freeze:
            self._freeze(comp, options, progress)
        changes, repeat_warning = self.history.record(captured, comp, options, key,
                                                      compiled=cached is None)
        if repeat_warning:
            warnings.append(repeat_warning)
        if changes:
            comp.extras["changes"] = {"text": "\n".join(changes), "items": changes}
        else:
            comp.extras.pop("changes", None)
        comp.notes.extend(w for w in warnings if w not in comp.notes)
        bound = self._bind(captured, comp, target, namespace)
        global _LAST
        _LAST = comp
        return CellResult(comp, captured, bound, cached is not None, changes, warnings)

    def _measure(self, comp: Compilation, options: CellOptions,
                 progress: Callable[[str], None] | None) -> None:
        if not (options.bench or options.ablate or options.debug):
            return
        from . import measure_hooks

        measure_hooks.run(comp, options, progress)

    def _freeze(self, comp: Compilation, options: CellOptions,
                progress: Callable[[str], None] | None) -> None:
        from . import measure_hooks

        measure_hooks.freeze(comp, options, progress)

    @staticmethod
    def _bind(captured: Captured, comp: Compilation, target: Any,
              namespace: dict[str, Any]) -> list[str]:
        """Rebind a cell-defined function to its compiled jit object (models stay as they are)."""
        name = captured.target_name
        adapted = comp.adapted
        if name is None or namespace.get(name) is not target:
            return []
        if adapted is not None and not adapted.rebindable:
            return []
        if getattr(comp, "target", None) is not None and not comp.target.present:
            return []  # compiled for a device that is not here: keep the Python function
        if not defined_in(target, captured.source.filename):
            return []
        fn = comp.fn
        try:
            fn.compilation = comp
        except AttributeError:
            return []
        namespace[name] = fn
        return [name]
