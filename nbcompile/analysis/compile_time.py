"""Where a program's compile time goes: :class:`CompileTime`, from measured figures (pure).

The parts are measured: ``trace`` and ``lower`` by the stages that built the program, the XLA
compile by the stage (or, when JAX's persistent cache served it, by one fresh compile), split
into ``xla`` (the HLO passes) and ``codegen`` (buffer assignment, LLVM, machine code) in the
proportion measured on the dumped compile: the time until its last HLO pass was written. So
``trace + lower + xla + codegen == total``.

Trace time is spent where equations are emitted: ``eqns_by_line`` counts the closed jaxpr's
equations by the user's source line (nested programs included: each equation of a ``scan`` or
``jit`` body once, as traced), and ``by_line`` shares the measured trace time out in
proportion (an estimate: Python does not time each line). When one line emits a dominant share
of the equations (a Python loop unrolled at trace time), ``advice`` says what to do.
"""

from __future__ import annotations

import ast
import linecache
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CompileTime", "compile_time", "enclosing_loop", "eqns_by_line", "loop_advice"]

#: a line holding at least this share of the equations (and MIN_EQNS of them) gets advice
DOMINANT_SHARE = 0.5
MIN_EQNS = 20


@dataclass(frozen=True)
class CompileTime:
    """Measured seconds: ``trace``, ``lower``, ``xla`` (HLO passes), ``codegen`` and their
    ``total``; ``by_pipeline`` ({XLA pipeline: s}, coarse: wall time between the dumped
    compile's files); ``by_line`` ({location: trace s}, shared by equation count);
    ``eqns_by_line`` ({location: jaxpr equations}); ``advice`` [(text, location, share)]."""

    trace: float | None
    lower: float | None
    xla: float | None
    codegen: float | None
    total: float
    by_pipeline: dict[str, float] = field(default_factory=dict)
    by_line: dict[Any, float] = field(default_factory=dict)
    eqns_by_line: dict[Any, int] = field(default_factory=dict)
    advice: list[tuple[str, Any, float]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def text(self) -> str:
        parts = ", ".join(
            f"{name} {value:.3f} s"
            for name, value in (
                ("trace", self.trace),
                ("lower", self.lower),
                ("xla", self.xla),
                ("codegen", self.codegen),
            )
            if value is not None
        )
        lines = [f"compile {self.total:.3f} s: {parts}"]
        lines += [f"  advice: {text}" for text, _, _ in self.advice]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<CompileTime {self.text()}>"


def eqns_by_line(graph: Any) -> dict[Any, int]:
    """{location: equations} of a traced graph (one ``op`` node per equation, nested programs
    walked; call equations themselves not counted), most first."""
    counts = Counter(
        node.location for node in graph.nodes if node.kind == "op" and node.location is not None
    )
    return dict(counts.most_common())


def enclosing_loop(file: str, line: int) -> tuple[int, int | None] | None:
    """(line, iterations) of the innermost Python ``for`` / ``while`` loop around ``line`` of
    ``file`` (a cell's source as IPython registered it, or a file), iterations when the loop is
    ``for ... in range(<number>)``; None when the line is in no loop or the source is unknown."""
    text = "".join(linecache.getlines(file))
    if not text:
        return None
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    found = None
    for node in ast.walk(tree):
        if not isinstance(node, ast.For | ast.While) or not node.body:
            continue
        first, last = node.body[0].lineno, node.body[-1].end_lineno or node.lineno
        if first <= line <= last and (found is None or node.lineno > found.lineno):
            found = node
    if found is None:
        return None
    return found.lineno, _range_length(found)


def _range_length(loop: ast.For | ast.While) -> int | None:
    it = getattr(loop, "iter", None)
    if (
        isinstance(it, ast.Call)
        and isinstance(it.func, ast.Name)
        and it.func.id == "range"
        and len(it.args) == 1
        and isinstance(it.args[0], ast.Constant)
        and isinstance(it.args[0].value, int)
    ):
        return it.args[0].value
    return None


def loop_advice(eqns: dict[Any, int]) -> list[tuple[str, Any, float]]:
    """[(text, location, share)] for a line that emits a dominant share of the equations."""
    total = sum(eqns.values())
    out = []
    for location, count in eqns.items():
        share = count / total if total else 0.0
        if share < DOMINANT_SHARE or count < MIN_EQNS:
            continue
        label = getattr(location, "label", str(location))
        loop = enclosing_loop(location.file, location.line) if hasattr(location, "file") else None
        if loop is None:
            why = "if it runs in a Python loop, that loop is unrolled at trace time"
        else:
            times = f" {loop[1]}×" if loop[1] else ""
            why = f"it is in the Python loop of line {loop[0]}, unrolled{times} at trace time"
        out.append(
            (
                f"{label} emits {count} of {total} equations ({share:.0%}): {why}; trace the "
                "body once with jax.lax.scan (nnx.scan for Flax modules, a scan over stacked "
                "layers for Equinox) to cut trace and compile time",
                location,
                share,
            )
        )
    return out


def compile_time(
    *,
    trace: float | None,
    lower: float | None,
    compile_seconds: float,
    passes_share: float | None,
    by_pipeline: dict[str, float] | None,
    eqns: dict[Any, int],
    notes: list[str] | None = None,
) -> CompileTime:
    """A :class:`CompileTime` from measured figures (see the module docstring)."""
    xla = codegen = None
    if passes_share is not None:
        xla = compile_seconds * passes_share
        codegen = compile_seconds - xla
    total_eqns = sum(eqns.values())
    by_line = (
        {loc: trace * n / total_eqns for loc, n in eqns.items()} if trace and total_eqns else {}
    )
    return CompileTime(
        trace=trace,
        lower=lower,
        xla=xla,
        codegen=codegen,
        total=(trace or 0.0) + (lower or 0.0) + compile_seconds,
        by_pipeline=dict(by_pipeline or {}),
        by_line=by_line,
        eqns_by_line=dict(eqns),
        advice=loop_advice(eqns),
        notes=list(notes or []),
    )
