"""``debug_run``: run a traced program op by op, summarise every value, stop at the first NaN.

Each equation (containers and nested equations included, ids from :mod:`nbcompile.debug.ids`)
gets a summary (:mod:`nbcompile.debug.summary`). For an equation inside a loop the summary
describes its *last* evaluation; ``evaluations`` counts them and ``iteration`` names the last one.
Only summaries are kept unless ``keep_values=True``; :meth:`DebugResult.value` recomputes any one
value on demand by replaying the program up to it, so values that XLA fused away stay reachable.

Stopping rule (``stop_on``): ``"nan"`` (default) stops at the first equation that produces a NaN
from NaN-free inputs, i.e. where invalid arithmetic happened (``inf - inf``, ``0/0``, ``log(-1)``);
``"nan_inf"`` also stops where an Inf first appears (overflow, ``1/0``); ``"none"`` never stops.
Either way the first equation that produced an Inf is reported as ``first_inf``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp

from ..capture.source import SourceInfo
from ..errors import NbcompileError
from .diverge import Divergence, find_divergence
from .interpreter import Interpreter
from .summary import has_inf, has_nan, short, summarise

__all__ = ["DebugResult", "debug_run", "eqn_location"]

STOP_MODES = ("nan", "nan_inf", "none")
# Frames in these folders are never "user code": JAX, jaxlib and nbcompile itself.
_INTERNAL_DIRS = tuple(
    os.path.dirname(os.path.abspath(path)) + os.sep
    for path in (jax.__file__, __import__("jaxlib").__file__, os.path.dirname(__file__))
    if path
)


def eqn_location(eqn: Any, source: SourceInfo | None = None) -> dict[str, Any]:
    """``{"file", "file_line", "line", "where"}`` of an equation: the frame in the cell file when
    there is one (``line`` is then the visible cell line), else the innermost frame outside
    JAX/nbcompile (``line`` None); ``where`` is how the user sees it (``line 4``, ``In [3] line
    2``, ``model.py:12``)."""
    tb = getattr(getattr(eqn, "source_info", None), "traceback", None)
    frames = list(getattr(tb, "frames", None) or [])
    user = [f for f in frames if not f.file_name.startswith(_INTERNAL_DIRS)]
    if source is not None:
        for f in user:
            line = source.visible_line(f.file_name, f.line_num)
            if line is not None:
                return {
                    "file": f.file_name,
                    "file_line": f.line_num,
                    "line": line,
                    "where": f"line {line}",
                }
    if user:
        file, file_line = user[0].file_name, user[0].line_num
        where = source.label_of(file, file_line) if source is not None else None
        return {
            "file": file,
            "file_line": file_line,
            "line": None,
            "where": where or f"{file}:{file_line}",
        }
    return {"file": None, "file_line": None, "line": None, "where": None}


class _Stop(Exception):
    pass


class _Found(Exception):
    def __init__(self, value: Any) -> None:
        super().__init__("found")
        self.value = value


def replay_value(
    jaxpr: Any, args: Sequence[Any], node_id: str, output: int = 0, where: tuple[int, ...] = ()
) -> Any:
    """Output ``output`` of equation ``node_id`` at loop iteration ``where``, computed by
    replaying the program op by op up to it (no stop on NaN)."""

    def hook(nid: str, eqn: Any, invals: list, outvals: list, it: tuple, leaf: bool) -> None:
        if nid == node_id and it == where:
            raise _Found(outvals[output])

    try:
        Interpreter(hook).run(jaxpr, list(args))
    except _Found as found:
        return found.value
    raise KeyError(f"{node_id!r} iteration {list(where)} was not reached on replay")


@dataclass
class DebugResult:
    """The outcome of :func:`debug_run` (see the module docstring).

    ``summaries`` maps node id -> ``{"id", "primitive", "line", "file", "file_line", "outputs":
    [summary per output], "evaluations", "iteration", "leaf"}``, in execution order.
    ``nan_at`` (None unless ``stopped``) holds the same location keys plus ``iteration``,
    ``code`` (the cell line's text), ``inputs`` and ``outputs`` summaries and ``kind``
    (``"nan"``/``"inf"``). ``outputs`` are the program outputs (None when stopped).
    ``program`` names the program that was checked (e.g. ``value_and_grad(loss)``), where known.
    """

    stopped: bool
    nan_at: dict[str, Any] | None
    summaries: dict[str, dict[str, Any]]
    outputs: list[Any] | None
    first_inf: dict[str, Any] | None = None
    stop_on: str = "nan"
    notes: list[str] = field(default_factory=list)
    divergence: Divergence | None = None
    program: str | None = None
    _jaxpr: Any = None
    _args: list[Any] = field(default_factory=list)
    _values: dict[tuple[str, tuple[int, ...]], list[Any]] | None = None

    def value(self, node_id: str, output: int = 0, iteration: Sequence[int] | None = None) -> Any:
        """The value of output ``output`` of equation ``node_id`` (default: its last evaluation),
        kept or recomputed by replaying the program up to that equation."""
        if node_id not in self.summaries:
            raise KeyError(
                f"{node_id!r} was not evaluated (unknown id, untaken branch, or after the stop)"
            )
        where = (
            tuple(iteration)
            if iteration is not None
            else tuple(self.summaries[node_id]["iteration"])
        )
        if self._values is not None and (node_id, where) in self._values:
            return self._values[(node_id, where)][output]

        return replay_value(self._jaxpr, self._args, node_id, output, where)

    @property
    def equations(self) -> int:
        return len(self.summaries)

    def error(self) -> NbcompileError | None:
        """An ``NBC700`` error describing the stop (None when the run did not stop)."""
        if not self.nan_at:
            return None
        at = self.nan_at
        what = "NaN" if at["kind"] == "nan" else "Inf"
        elsewhere = at.get("where") and at["where"] != f"line {at['line']}"
        return NbcompileError(
            f"{what} produced by `{at['primitive']}` ({at['id']})"
            + (f" at {at['where']}" if elsewhere else "")
            + self._in_program(),
            code="NBC700",
            line=at["line"],
            hint="inspect the inputs with result.nan_at['inputs'] or result.value(id)",
        )

    def _in_program(self) -> str:
        return f" in {self.program}" if self.program else ""

    def to_json(self) -> dict[str, Any]:
        return {
            "program": self.program,
            "stopped": self.stopped,
            "stop_on": self.stop_on,
            "nan_at": self.nan_at,
            "first_inf": self.first_inf,
            "equations": self.equations,
            "summaries": self.summaries,
            "outputs": [summarise(o) for o in self.outputs] if self.outputs is not None else None,
            "divergence": self.divergence.to_json() if self.divergence is not None else None,
            "notes": list(self.notes),
        }

    def text(self) -> str:
        lines = []
        if self.nan_at:
            at = self.nan_at
            what = "NaN" if at["kind"] == "nan" else "Inf"
            where = at.get("where") or f"line {at['line']}"
            if at["line"] and where != f"line {at['line']}":
                where += f" (called from line {at['line']})"
            it = f" iteration {at['iteration']}" if at["iteration"] else ""
            lines.append(
                f"Stopped at the first {what}{self._in_program()}: `{at['primitive']}` "
                f"({at['id']}{it}) at {where}"
            )
            if at.get("code"):
                lines.append(f"  {at['code'].strip()}")
            lines += [f"  input {i}: {short(s)}" for i, s in enumerate(at["inputs"])]
        else:
            of = f" of {self.program}" if self.program else ""
            lines.append(
                f"Ran {self.equations} equations{of} op by op; no NaN (stop_on={self.stop_on})."
            )
            lines += [
                f"  output {i}: {short(summarise(o))}" for i, o in enumerate(self.outputs or [])
            ]
        if self.first_inf and not (self.nan_at and self.nan_at["id"] == self.first_inf["id"]):
            fi = self.first_inf
            lines.append(
                f"  Inf first appeared at `{fi['primitive']}` ({fi['id']}), line {fi['line']}"
            )
        lines += [f"  note: {n}" for n in self.notes]
        if self.divergence is not None:
            lines.append(self.divergence.text())
        return "\n".join(lines)


class _Recorder:
    """The interpreter hook of :func:`debug_run`."""

    def __init__(self, source: SourceInfo | None, stop_on: str, keep_values: bool) -> None:
        self.source = source
        self.stop_on = stop_on
        self.summaries: dict[str, dict[str, Any]] = {}
        self.values: dict[tuple[str, tuple[int, ...]], list[Any]] | None = (
            {} if keep_values else None
        )
        self.nan_at: dict[str, Any] | None = None
        self.first_inf: dict[str, Any] | None = None
        self._where: dict[int, dict[str, Any]] = {}
        self.open: list[Any] = []  # the interpreter's containers being run (Interpreter.open)

    def location(self, eqn: Any) -> dict[str, Any]:
        if id(eqn) not in self._where:
            self._where[id(eqn)] = eqn_location(eqn, self.source)
        return self._where[id(eqn)]

    def __call__(
        self, nid: str, eqn: Any, invals: list, outvals: list, it: tuple[int, ...], leaf: bool
    ) -> None:
        outs = [summarise(v) for v in outvals]
        prev = self.summaries.get(nid)
        entry = {
            "id": nid,
            "primitive": eqn.primitive.name,
            **self.location(eqn),
            "outputs": outs,
            "evaluations": (prev["evaluations"] + 1) if prev else 1,
            "iteration": list(it),
            "leaf": leaf,
        }
        self.summaries[nid] = entry
        if self.values is not None:
            self.values[(nid, it)] = list(outvals)
        if not leaf:
            return
        if any(s["inf"] for s in outs) and self.first_inf is None and not any(map(has_inf, invals)):
            self.first_inf = self._details(entry, invals, it, "inf")
            if self.stop_on == "nan_inf":
                self.nan_at = self.first_inf
                raise _Stop
        if self.stop_on != "none" and any(s["nan"] for s in outs) and not any(map(has_nan, invals)):
            self.nan_at = self._details(entry, invals, it, "nan")
            raise _Stop

    def _details(self, entry: dict, invals: list, it: tuple[int, ...], kind: str) -> dict[str, Any]:
        keys = ("id", "primitive", "file", "file_line", "line", "where", "outputs")
        details = {k: entry.get(k) for k in keys}
        # nested in a cond/scan/checkpoint whose code is elsewhere: the cell line that runs it
        for outer in reversed(self.open if entry["line"] is None else []):
            if self.location(outer)["line"] is not None:
                details["line"] = self.location(outer)["line"]
                break
        line = details["line"]
        details.update(
            kind=kind,
            iteration=list(it),
            code=self.source.line_text(line) if self.source is not None and line else None,
            inputs=[summarise(v) for v in invals],
        )
        return details


def debug_run(
    closed_jaxpr: Any,
    args: Sequence[Any],
    source: SourceInfo | None = None,
    keep_values: bool = False,
    stop_on: str = "nan",
    compare: bool = True,
    compiled_outputs: Sequence[Any] | None = None,
    hlo: str | None = None,
    program: str | None = None,
    compiler_options: dict[str, Any] | None = None,
) -> DebugResult:
    """Run ``closed_jaxpr`` op by op on ``args`` (a pytree of example arguments, flattened to the
    jaxpr's inputs), summarising every equation and stopping per ``stop_on``.

    With ``compare`` the compiled program's values are compared with the op-by-op ones and the
    first divergent value located (:mod:`nbcompile.debug.diverge`): ``compiled_outputs`` (its
    flat outputs for these arguments) and ``hlo`` (its optimised HLO text) describe the program
    as the user compiled it; without them the traced program is compiled here. ``program``
    names the program for the result's text (``value_and_grad(loss)``); ``compiler_options``
    are the XLA options it was compiled with (the prefixes compared are compiled with them)."""
    if stop_on not in STOP_MODES:
        raise ValueError(f"stop_on must be one of {STOP_MODES}, not {stop_on!r}")
    flat = [x if isinstance(x, jax.Array) else jnp.asarray(x) for x in jax.tree.leaves(args)]
    n_in = len(closed_jaxpr.jaxpr.invars)
    if len(flat) != n_in:
        raise ValueError(f"the program takes {n_in} array inputs, got {len(flat)} after flattening")
    recorder = _Recorder(source, stop_on, keep_values)
    interp = Interpreter(recorder)
    recorder.open = interp.open
    notes = [f"argument {i} already contains NaN" for i, a in enumerate(flat) if has_nan(a)]
    outputs: list[Any] | None
    try:
        outputs = interp.run(closed_jaxpr, flat)
    except _Stop:
        outputs = None
    notes += [
        f"{nid}: `{prim}` was run as one op (its sub-program is not opened by the debugger)"
        for nid, prim in interp.opaque.items()
    ]
    result = DebugResult(
        stopped=recorder.nan_at is not None,
        nan_at=recorder.nan_at,
        summaries=recorder.summaries,
        outputs=outputs,
        first_inf=recorder.first_inf,
        stop_on=stop_on,
        notes=notes,
        program=program,
        _jaxpr=closed_jaxpr,
        _args=flat,
        _values=recorder.values,
    )
    if compare:

        def locate(eqn: Any) -> dict[str, Any]:
            where = eqn_location(eqn, source)
            line = where["line"]
            code = source.line_text(line) if source is not None and line else None
            return {**where, "code": code}

        result.divergence = find_divergence(
            closed_jaxpr,
            flat,
            eager_value=lambda nid, i: replay_value(closed_jaxpr, flat, nid, i),
            stopped_at=result.nan_at["id"] if result.nan_at else None,
            eager_outputs=outputs,
            compiled_outputs=compiled_outputs,
            hlo=hlo,
            locate=locate,
            compiler_options=compiler_options,
        )
    return result
