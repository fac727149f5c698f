"""Constant folding at the three levels where it happens.

* ``trace``: closed-over arrays become constants baked into the program (named when the
  function's globals or closure hold them). Large ones (> 1 MB) get a hint. JAX >= 0.12.1
  passes arrays above ``jax_embedded_constants_max_bytes`` (1 KB) to the program as arguments
  instead: they are listed as such, and the work on them (XLA cannot fold it: it is no
  longer constant to XLA) is listed as not folded, with the hint.
* ``lowering``: computations on literals that the StableHLO -> HLO conversion already folded,
  so they never reach XLA (present in the jaxpr, absent from pre-optimisation HLO).
* ``xla``: constant sub-computations of the pre-optimisation HLO (every input a constant, at
  least one computing op) and whether XLA's optimiser folded them (``folded``) or left them to
  run (e.g. XLA:CPU does not fold ``iota`` sources) — reported honestly either way.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _compat
from ..capture.source import Location
from .hlo import HloModule, Instruction, shape_bytes
from .lines import Locator
from .traced import _MOVEMENT, Traced

__all__ = ["LARGE_CONSTANT_BYTES", "Folded", "find_folded"]

LARGE_CONSTANT_BYTES = 1 << 20
_HLO_MOVEMENT = {
    "broadcast",
    "reshape",
    "transpose",
    "bitcast",
    "copy",
    "slice",
    "convert",
    "concatenate",
    "pad",
    "iota",
    "constant",
    "parameter",
    "tuple",
    "get-tuple-element",
}
_HINT_ARGUMENT = (
    "JAX passes closed-over arrays larger than jax_embedded_constants_max_bytes ({limit} "
    "bytes; JAX >= 0.12.1) to the program as arguments, so XLA cannot fold work on them: "
    "compute it once outside the function, or raise the limit with "
    "jax.config.update('jax_embedded_constants_max_bytes', ...)"
)
_HINT_LARGE = (
    "pass it as an argument instead: a baked-in array makes the program {mb:.1f} MB "
    "larger and every compile slower"
)


@dataclass
class Folded:
    what: str
    stage: str
    bytes: int
    shape: str
    line: int | None = None
    hint: str | None = None
    folded: bool = True
    ops: tuple[str, ...] = ()
    name: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "what": self.what,
            "stage": self.stage,
            "bytes": self.bytes,
            "shape": self.shape,
            "line": self.line,
            "hint": self.hint,
            "folded": self.folded,
            "ops": list(self.ops),
            "name": self.name,
            "from": {"bytes": "XLA" if self.stage == "xla" else "estimate"},
        }


def _names(fn: Any) -> dict[int, str]:
    """id of array -> name for arrays reachable from fn's globals and closure."""
    if fn is None:
        return {}
    fn = inspect.unwrap(getattr(fn, "__wrapped__", fn))
    pool: dict[str, Any] = {}
    pool.update(getattr(fn, "__globals__", {}) or {})
    code = getattr(fn, "__code__", None)
    for name, cell in zip(
        getattr(code, "co_freevars", ()), getattr(fn, "__closure__", None) or (), strict=False
    ):
        try:
            pool[name] = cell.cell_contents
        except ValueError:
            continue
    return {id(v): k for k, v in pool.items() if hasattr(v, "shape") and hasattr(v, "dtype")}


def _name_of(value: Any, names: dict[int, str], pool: dict[str, Any]) -> str | None:
    if id(value) in names:
        return names[id(value)]
    if isinstance(value, np.ndarray):
        for name, candidate in pool.items():
            if isinstance(candidate, np.ndarray) and np.shares_memory(candidate, value):
                return name
    return None


def _trace_constants(traced: Traced, fn: Any, consumers: dict[str, int | None]) -> list[Folded]:
    names = _names(fn)
    pool = {}
    if fn is not None:
        fn_ = inspect.unwrap(getattr(fn, "__wrapped__", fn))
        pool = {
            k: v
            for k, v in (getattr(fn_, "__globals__", {}) or {}).items()
            if isinstance(v, np.ndarray)
        }
    out = []
    for node, _var, value in traced.consts:
        name = _name_of(value, names, pool)
        mb = node.bytes / 1e6
        hint = _HINT_LARGE.format(mb=mb) if node.bytes > LARGE_CONSTANT_BYTES else None
        what = f"closed-over constant {name}" if name else "closed-over constant"
        if _compat.passed_as_argument(value):
            what += ", passed as an argument"
            hint = _hint_argument()
        # captured into the program as a constant at trace time: not folding (nothing was
        # computed ahead of time), so it does not count as a folded constant
        out.append(
            Folded(
                what,
                "trace",
                node.bytes,
                node.shape,
                consumers.get(node.id),
                hint,
                folded=False,
                name=name,
            )
        )
    return out


def _key(instr: Instruction) -> str | None:
    name = instr.op_name
    return name.split(";", 1)[0].rsplit("/", 1)[-1] if name else None


def _hlo_const_roots(module: HloModule) -> list[tuple[Instruction, list[Instruction]]]:
    roots = []
    for comp in module.computations.values():
        const: dict[str, list[Instruction]] = {}
        for instr in comp.instructions:
            if instr.opcode in ("constant", "iota"):
                const[instr.name] = [instr]
            elif (
                instr.opcode
                not in (
                    "parameter",
                    "rng",
                    "rng-bit-generator",
                    "custom-call",
                    "infeed",
                    "recv",
                    "while",
                    "conditional",
                    "call",
                )
                and instr.operands
                and all(o in const for o in instr.operands)
            ):
                members = [instr]
                for o in instr.operands:
                    members.extend(m for m in const[o] if m not in members)
                const[instr.name] = members
        used_by_const = {o for n, ms in const.items() for o in ms[0].operands if n in const}
        for name, members in const.items():
            computing = [m for m in members if m.opcode not in _HLO_MOVEMENT]
            if name not in used_by_const and computing:
                roots.append((members[0], members))
    return roots


def has_const_candidates(traced: Traced) -> bool:
    """Whether the traced program has constant computations that folding must check (only
    then is the pre-optimisation module needed)."""
    return bool(_const_eqns_from_graph(traced))


def find_folded(
    traced: Traced, pre: HloModule | None, post: HloModule | None, source: Locator, fn: Any = None
) -> list[Folded]:
    """Everything constant about the program, in trace / lowering / xla order.

    ``pre`` (the pre-optimisation module) may be a callable: it is only needed, and only
    called, when the traced program has constant computations to check."""
    consumers: dict[str, int | None] = {}
    for e in traced.graph.edges:
        if e.src not in consumers:
            dst = traced.graph.node(e.dst)
            consumers[e.src] = dst.line if dst is not None else None
    out = _trace_constants(traced, fn, consumers)
    candidates = _const_eqns_from_graph(traced)
    if pre is None or not candidates:
        return out
    arguments = _on_arguments(traced, candidates)
    pre_keys = {
        (_key(i), _where(pre, i, source))
        for c in pre.computations.values()
        for i in c.instructions
        if i.opcode != "constant"
    }
    for e in candidates:
        if e.node.id in arguments:
            if arguments[e.node.id]:  # the last such op of its chain: one entry per chain
                out.append(
                    Folded(
                        f"{e.primitive} of closed-over constants passed as arguments",
                        "trace",
                        e.node.bytes,
                        e.node.shape,
                        e.node.line,
                        _hint_argument(),
                        folded=False,
                        ops=(e.primitive,),
                    )
                )
            continue
        if (e.primitive, e.node.location) not in pre_keys:
            e.node.folded = True
            out.append(
                Folded(
                    f"{e.primitive} on constants",
                    "lowering",
                    e.node.bytes,
                    e.node.shape,
                    e.node.line,
                    ops=(e.primitive,),
                )
            )
    roots = _hlo_const_roots(pre)
    if post is None or not roots:
        return out
    # Keyed by source location too: the folded `A @ B` and the `x @ M` that uses it are both
    # "dot_general" ops, and only their lines tell them apart.
    post_keys = {
        (i.opcode, i.op_name, _where(post, i, source))
        for c in post.computations.values()
        for i in c.instructions
        if i.opcode != "constant"
    }
    for root, members in roots:
        survived = (root.opcode, root.op_name, _where(pre, root, source)) in post_keys
        hint = (
            None
            if not survived
            else (
                "XLA left this constant computation to run at every call (its constant-folding "
                "pass skips iota and broadcast sources on every backend, by design: folding them "
                "would only trade a cheap generated value for a large stored one); precompute it "
                "once outside and pass it in if it is expensive"
            )
        )
        ops = tuple(m.opcode for m in members)
        out.append(
            Folded(
                f"{root.opcode} of constants ({len(members)} ops)",
                "xla",
                shape_bytes(root.shape),
                root.shape.split("{")[0],
                _line(pre, root, source),
                hint,
                folded=not survived,
                ops=ops,
            )
        )
    return out


def _hint_argument() -> str:
    import jax

    return _HINT_ARGUMENT.format(limit=getattr(jax.config, "jax_embedded_constants_max_bytes", "?"))


def _on_arguments(traced: Traced, candidates: list[Any]) -> dict[str, bool]:
    """Constant computations that read an array JAX passes as an argument (node id -> whether
    no other such computation reads it: the end of its chain)."""
    passed = {node.id for node, _var, value in traced.consts if _compat.passed_as_argument(value)}
    if not passed:
        return {}
    inputs: dict[str, list[str]] = {}
    for edge in traced.graph.edges:
        inputs.setdefault(edge.dst, []).append(edge.src)
    reached = set(passed)
    for e in traced.eqns:  # in trace order: inputs before their readers
        if any(s in reached for s in inputs.get(e.node.id, [])):
            reached.add(e.node.id)
    found = {e.node.id for e in candidates if e.node.id in reached}
    read = {s for node_id in found for s in inputs.get(node_id, [])}
    return {node_id: node_id not in read for node_id in found}


def _const_eqns_from_graph(traced: Traced) -> list[Any]:
    """Computing equations all of whose inputs are constant-valued in the traced graph."""
    if traced.const_eqns is not None:
        return traced.const_eqns
    graph = traced.graph
    const: set[str] = {n.id for n in graph.nodes if n.kind == "const"}
    inputs: dict[str, list[str]] = {}
    for e in graph.edges:
        inputs.setdefault(e.dst, []).append(e.src)
    found = []
    for e in traced.eqns:
        if e.is_call:
            continue
        srcs = inputs.get(e.node.id, [])
        if all(s in const for s in srcs):
            const.add(e.node.id)
            if e.primitive not in _MOVEMENT and e.primitive != "iota" and srcs:
                found.append(e)
    traced.const_eqns = found
    return found


def _line(module: HloModule, instr: Instruction, source: Locator) -> int | None:
    return source.of_instruction(module, instr)[1]


def _where(module: HloModule, instr: Instruction, source: Locator) -> Location | None:
    return source.of_instruction(module, instr)[0]
