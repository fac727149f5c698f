"""Where the compiled program and the op-by-op run disagree, and which HLO ops did it.

``--debug`` replays the traced program op by op: eager numerics. XLA compiles a *rewritten*
program (algebraic simplification, fusion, reassociation), which can compute a different value:
``exp(a) / exp(a)`` is rewritten to ``exp(a - a)``, so where ``exp(a)`` overflows the op-by-op run
gives ``inf / inf = NaN`` and the compiled program ``1``. :func:`find_divergence` says when that
happens and where it starts:

1. the *target*: the equation where the op-by-op run stopped (its first NaN), or the equation
   producing a program output that differs from the compiled program's;
2. each candidate equation's value is computed by XLA from the program inputs by compiling the
   *prefix* of the program that ends at it (equations up to it, its outputs as the only outputs;
   source locations kept, so XLA applies the same rewrites there) and compared with the op-by-op
   value;
3. from the target, walk back to a producer whose value also differs, until every input of the
   equation agrees: that equation is the *first divergent value* — XLA's inputs to it equal the
   op-by-op ones, its output does not;
4. the ops of the optimised program that come from that equation (same source line, same
   primitive in their ``op_name``), with the fusion holding them: the rewrite responsible.

Values *differ* when their NaN or Inf positions differ, or when finite values differ by more than
``rtol * max|op-by-op value|`` (``rtol`` 1e-3 for 32/64-bit floats, 3e-2 for 16-bit ones: fusion
reorders floating-point sums, which is not a divergence); integers and booleans compare exactly.
Only top-level equations are compared (a nested ``jit`` is one unit, named by its top-level id).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.extend.core as jcore
import numpy as np

from ..analysis.hlo import parse_hlo
from .summary import short, summarise

__all__ = ["Divergence", "differ", "find_divergence"]

MAX_STEPS = 32  # prefix compiles in one walk: each is one small XLA compile


def _tolerance(dtype: np.dtype) -> float:
    return 3e-2 if np.dtype(dtype).itemsize <= 2 else 1e-3


def differ(compiled: Any, eager: Any) -> bool:
    """Whether two values of the same equation disagree (see the module docstring)."""
    a, b = np.asarray(jax.device_get(compiled)), np.asarray(jax.device_get(eager))
    if a.shape != b.shape:
        return True
    if not (np.issubdtype(b.dtype, np.inexact) or "float" in str(b.dtype)):
        return not np.array_equal(a, b)
    a, b = a.astype(np.float64), b.astype(np.float64)
    if not np.array_equal(np.isnan(a), np.isnan(b)):
        return True
    inf_a, inf_b = np.isinf(a), np.isinf(b)
    if not np.array_equal(inf_a, inf_b) or not np.array_equal(a[inf_a], b[inf_b]):
        return True
    finite = np.isfinite(a) & np.isfinite(b)
    if not finite.any():
        return False
    scale = float(np.abs(b[finite]).max())
    gap = float(np.abs(a[finite] - b[finite]).max())
    return gap > _tolerance(b.dtype) * max(scale, np.finfo(np.float32).tiny)


@dataclass
class Divergence:
    """Compiled vs op-by-op. ``outputs_differ``: indices of program outputs that differ (None
    when the op-by-op run stopped before its outputs). ``first``: the first divergent equation
    (``id``, ``primitive``, ``line``, ``file``, ``file_line``, ``where``, ``code``, ``eager`` and
    ``compiled`` value summaries), None when none was found. ``hlo_ops``: the optimised
    program's ops from that equation (``name``, ``opcode``, ``fusion``, ``text``);
    ``compiled_outputs`` summarises the compiled program's outputs."""

    outputs_differ: list[int] | None
    first: dict[str, Any] | None
    hlo_ops: list[dict[str, Any]] = field(default_factory=list)
    compiled_outputs: list[dict[str, Any]] = field(default_factory=list)  # value summaries
    stopped_at: str | None = None  # the op-by-op run stopped there (its first NaN)
    compared: int = 0  # prefix programs compiled and compared
    notes: list[str] = field(default_factory=list)

    @property
    def differs(self) -> bool:
        return self.first is not None or bool(self.outputs_differ)

    def to_json(self) -> dict[str, Any]:
        return {
            "outputs_differ": self.outputs_differ,
            "first": self.first,
            "hlo_ops": self.hlo_ops,
            "compiled_outputs": self.compiled_outputs,
            "stopped_at": self.stopped_at,
            "compared": self.compared,
            "notes": list(self.notes),
        }

    def text(self) -> str:
        outs = ", ".join(short(s) for s in self.compiled_outputs)
        if not self.differs:
            if self.stopped_at:
                return (
                    "The compiled program computes the same value where the op-by-op run "
                    f"stopped ({self.stopped_at}; compiled output: {outs})."
                )
            return "The compiled program computes the same values as the op-by-op run."
        lines = []
        if self.stopped_at:
            lines.append(
                f"The compiled program does not compute what the op-by-op run did at "
                f"{self.stopped_at}: XLA rewrote it (compiled output: {outs})."
            )
        if self.outputs_differ:
            lines.append(
                f"The compiled program's output(s) {self.outputs_differ} differ from the "
                "op-by-op run: XLA computed a rewritten program."
            )
        if self.first:
            f = self.first
            where = f.get("where") or (
                f"line {f['line']}" if f["line"] else f"{f['file']}:{f['file_line']}"
            )
            lines.append(
                f"First divergent value: `{f['primitive']}` ({f['id']}) at {where}"
                + (f": {f['code'].strip()}" if f.get("code") else "")
            )
            lines.append(f"  op by op: {short(f['eager'])}")
            lines.append(f"  compiled: {short(f['compiled'])}")
            mine = [op for op in self.hlo_ops if op["from"]]
            if mine:
                fusion = mine[0]["fusion"]
                lines.append(
                    f"  XLA computes `{f['primitive']}` as "
                    f"{', '.join(op['opcode'] for op in mine)} "
                    f"({'in ' + fusion if fusion else 'unfused'}; → from this line):"
                )
                lines += [f"   {'→' if op['from'] else ' '} {op['text']}" for op in self.hlo_ops]
            else:
                lines.append(
                    "  no op of the optimised program comes from it: XLA removed or folded it"
                )
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _prefix_fn(closed: Any, k: int) -> Callable[..., list[Any]]:
    """The program's equations up to ``k`` (top level) with equation ``k``'s outputs as outputs."""
    inner = closed.jaxpr
    outs = [v for v in inner.eqns[k].outvars if not isinstance(v, jcore.DropVar)]
    info = inner.debug_info  # a NamedTuple: its result names belong to the whole program
    info = info._replace(result_paths=None) if info is not None else None
    prefix = jcore.Jaxpr(
        inner.constvars,
        inner.invars,
        outs,
        inner.eqns[: k + 1],
        effects=inner.effects,
        debug_info=info,
    )
    return jcore.jaxpr_as_fun(jcore.ClosedJaxpr(prefix, closed.consts))


class _Walk:
    """Compiles prefixes and compares them with op-by-op values, memoised per equation."""

    def __init__(
        self,
        closed: Any,
        flat: list[Any],
        eager_value: Callable[[str, int], Any],
        compiler_options: dict[str, Any] | None = None,
    ):
        self.closed, self.flat, self.eager_value = closed, flat, eager_value
        self.eqns = closed.jaxpr.eqns
        self.producer = {id(v): i for i, e in enumerate(self.eqns) for v in e.outvars}
        self.memo: dict[int, tuple[bool, Any, Any] | None] = {}
        self.compiled_count = 0
        self.compiler_options = compiler_options

    def check(self, k: int) -> tuple[bool, Any, Any] | None:
        """``(differs, compiled value, op-by-op value)`` of equation ``k``'s first array output
        (None when it has none to compare)."""
        if k in self.memo:
            return self.memo[k]
        eqn = self.eqns[k]
        index = next(
            (
                i
                for i, v in enumerate(eqn.outvars)
                if not isinstance(v, jcore.DropVar) and hasattr(v.aval, "shape")
            ),
            None,
        )
        result = None
        if index is not None and self.compiled_count < MAX_STEPS:
            self.compiled_count += 1
            kept = [i for i, v in enumerate(eqn.outvars) if not isinstance(v, jcore.DropVar)]
            prefix = jax.jit(_prefix_fn(self.closed, k)).lower(*self.flat)
            outs = prefix.compile(compiler_options=self.compiler_options)(*self.flat)
            compiled = outs[kept.index(index)]
            eager = self.eager_value(f"e{k}", index)
            result = (differ(compiled, eager), compiled, eager)
        self.memo[k] = result
        return result

    def first_from(self, target: int) -> int | None:
        """Walk back from a divergent ``target`` to the first divergent equation."""
        checked = self.check(target)
        if checked is None or not checked[0]:
            return None
        current = target
        while True:
            inputs = [
                self.producer[id(v)]
                for v in self.eqns[current].invars
                if isinstance(v, jcore.Var) and id(v) in self.producer
            ]
            step = next((j for j in inputs if (c := self.check(j)) is not None and c[0]), None)
            if step is None:
                return current
            current = step


def hlo_ops_of(hlo: str, file: str | None, file_line: int | None, primitive: str) -> list[dict]:
    """Ops of an optimised HLO module that come from ``file:file_line`` and name ``primitive``
    last in their ``op_name`` (``jit(f)/div``; ``"from": True``), with the ops around them in
    their computation — the operands they read and the ops reading them (``"from": False``) —
    in program order, each with the fusion holding it (None at the top level)."""
    if file is None or file_line is None:
        return []
    module = parse_hlo(hlo)
    callers = {
        called: inst.name
        for comp in module.computations.values()
        for inst in comp.instructions
        for called in inst.called
    }
    found = []
    for comp in module.computations.values():
        matched = {
            inst.name
            for inst in comp.instructions
            if (inst.op_name or "").rsplit("/", 1)[-1] == primitive
            and (file, file_line) in module.stack(inst)
        }
        if not matched:
            continue
        around = {op for inst in comp.instructions if inst.name in matched for op in inst.operands}
        around |= {inst.name for inst in comp.instructions if matched & set(inst.operands)}
        fusion = None if comp.is_entry else callers.get(comp.name)
        for inst in comp.instructions:
            if inst.name in matched or (inst.name in around and inst.opcode != "parameter"):
                text = f"{inst.name} = {inst.shape} {inst.opcode}({', '.join(inst.operands)})"
                found.append(
                    {
                        "name": inst.name,
                        "opcode": inst.opcode,
                        "fusion": fusion,
                        "from": inst.name in matched,
                        "text": text,
                    }
                )
    return found


def find_divergence(
    closed: Any,
    flat: Sequence[Any],
    *,
    eager_value: Callable[[str, int], Any],
    stopped_at: str | None,
    eager_outputs: Sequence[Any] | None,
    compiled_outputs: Sequence[Any] | None,
    hlo: str | None,
    locate: Callable[[Any], dict[str, Any]],
    compiler_options: dict[str, Any] | None = None,
) -> Divergence:
    """Compare compiled and op-by-op values (see the module docstring). ``eager_value(id, i)``
    gives an op-by-op value; ``stopped_at`` is the id where the op-by-op run stopped (or None,
    then ``eager_outputs`` are its outputs); ``compiled_outputs`` / ``hlo`` are the compiled
    program's flat outputs and optimised HLO (compiled here from ``closed`` when None);
    ``locate(eqn)`` gives an equation's location keys (``line``, ``file``, ``file_line``,
    ``code``). ``compiler_options``: those the user's program was compiled with (XLA's
    rewrites depend on them: JAX 0.12's XLA:CPU rewrites ``exp(a) / exp(a)`` to ``exp(a - a)``
    only with ``xla_cpu_enable_fast_math``), used for every prefix compiled here."""
    flat = list(flat)
    notes: list[str] = []
    if compiled_outputs is None or hlo is None:
        lowered = jax.jit(jcore.jaxpr_as_fun(closed)).trace(*flat).lower()
        compiled = lowered.compile(compiler_options=compiler_options or None)
        hlo = compiled.as_text() if hlo is None else hlo
        if compiled_outputs is None:
            compiled_outputs = jax.tree.leaves(compiled(*flat))
            notes.append(
                "compared with the traced program compiled by XLA with "
                + ("the same compiler options" if compiler_options else "default options")
            )
    walk = _Walk(closed, flat, eager_value, compiler_options or None)
    outvars = closed.jaxpr.outvars
    targets: list[int] = []
    differing: list[int] | None = None
    if stopped_at is not None:
        targets.append(int(stopped_at.split("/", 1)[0][1:]))
    else:
        differing = [
            i
            for i, (c, e) in enumerate(zip(compiled_outputs, eager_outputs or [], strict=False))
            if differ(c, e)
        ]
        targets += [
            walk.producer[id(outvars[i])]
            for i in differing
            if isinstance(outvars[i], jcore.Var) and id(outvars[i]) in walk.producer
        ]
    first = next((k for t in targets if (k := walk.first_from(t)) is not None), None)
    if walk.compiled_count >= MAX_STEPS:
        notes.append(f"stopped after comparing {MAX_STEPS} prefixes of the program")
    result = Divergence(
        outputs_differ=differing,
        first=None,
        compared=walk.compiled_count,
        compiled_outputs=[summarise(o) for o in compiled_outputs],
        stopped_at=stopped_at,
        notes=notes,
    )
    if first is None:
        return result
    eqn = closed.jaxpr.eqns[first]
    _, compiled_value, eager = walk.memo[first]  # type: ignore[misc]
    where = locate(eqn)
    result.first = {
        "id": f"e{first}",
        "primitive": eqn.primitive.name,
        **where,
        "eager": summarise(eager),
        "compiled": summarise(compiled_value),
    }
    result.hlo_ops = hlo_ops_of(hlo, where.get("file"), where.get("file_line"), eqn.primitive.name)
    return result
