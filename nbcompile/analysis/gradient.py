"""Forward vs backward in a ``value_and_grad`` program, and the residuals between them.

Every jaxpr equation gets a phase from its name stack (``jvp(...)`` forward,
``transpose(jvp(...))`` backward); equations inside nested programs inherit their caller's;
equations with neither (code around the gradient, e.g. an optimiser update) are backward when
they read a backward value and forward otherwise. Remat recomputation (``rematted_computation``)
runs in the backward pass and is counted there, flagged ``recompute``. HLO instructions are
classified the same way from ``op_name``; a fusion holding both is ``mixed``.

A *residual* is a value produced by a forward equation and read by a backward one: what the
forward pass must keep alive for the backward pass. ``pairs`` pairs each of the user's calls
(``block#3``) with its backward group (``block#3 (backward)``) and the bytes of the residuals
the one saved for the other (a residual counts for every call that holds both its producer
and, marked backward, its reader: ``loss#1`` and ``block#3``). Library models (Flax, Equinox,
Keras) have module scopes, not calls: under ``--grad`` a scope's backward equations form its
``(backward)`` group in the traced graph (``Linear_0 (backward)``), and ``pairs`` pairs those
the same way, after the calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import _jax
from .calls import BACKWARD
from .compiled import CompiledInfo, op_name_phase
from .traced import Traced, _nbytes, _short

__all__ = ["Gradient", "Residual", "analyse_gradient"]


@dataclass
class Residual:
    shape: str
    bytes: int
    line: int | None
    primitive: str
    node: str

    def to_json(self) -> dict[str, Any]:
        return {
            "shape": self.shape,
            "bytes": self.bytes,
            "line": self.line,
            "primitive": self.primitive,
            "node": self.node,
        }


@dataclass
class Gradient:
    argnums: tuple[int, ...]
    forward_ops: int
    backward_ops: int
    recompute_ops: int
    kernels: dict[str, int]
    residuals: list[Residual] = field(default_factory=list)
    hlo_phases: dict[str, int] = field(default_factory=dict)
    #: (forward group, backward group, residual bytes), forward program order
    pairs: list[tuple[str, str, int]] = field(default_factory=list)

    @property
    def residual_bytes(self) -> int:
        return sum(r.bytes for r in self.residuals)

    @property
    def mixed_kernels(self) -> int:
        return self.kernels.get("mixed", 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "argnums": list(self.argnums),
            "forward_ops": self.forward_ops,
            "backward_ops": self.backward_ops,
            "recompute_ops": self.recompute_ops,
            "mixed_kernels": self.mixed_kernels,
            "kernels": dict(self.kernels),
            "residuals": [r.to_json() for r in self.residuals],
            "residual_bytes": self.residual_bytes,
            "hlo_instructions": dict(self.hlo_phases),
            "pairs": [list(p) for p in self.pairs],
            "from": "estimate",  # value sizes from the jaxpr's shapes
        }


def analyse_gradient(
    argnums: tuple[int, ...], traced: Traced, compiled: CompiledInfo | None
) -> Gradient:
    producer = {}
    for info in traced.eqns:
        for var in info.outvars:
            if not _jax.is_dropvar(var):
                producer[var] = info
    residuals: dict[Any, Residual] = {}
    saved: dict[tuple[str, ...], int] = {}  # forward call path -> residual bytes
    counted: set[tuple[Any, tuple[str, ...]]] = set()
    chains = _group_chains(traced.graph)
    scope_saved: dict[tuple[str, ...], int] = {}  # forward module group path -> residual bytes
    for info in traced.eqns:
        if info.phase != "backward":
            continue
        for var in info.invars:
            if _jax.is_literal(var):
                continue
            src = producer.get(var)
            if src is None or src.phase != "forward":
                continue
            if var not in residuals:
                residuals[var] = Residual(
                    _short(var.aval), _nbytes(var.aval), src.node.line, src.primitive, src.node.id
                )
            for path in _shared_calls(src.calls, info.calls):
                if (var, path) not in counted:
                    counted.add((var, path))
                    saved[path] = saved.get(path, 0) + _nbytes(var.aval)
            fwd, bwd = chains.get(src.node.group, ()), chains.get(info.node.group, ())
            for path in _shared_scopes(fwd, bwd):
                if (var, ("\0scope", *path)) not in counted:
                    counted.add((var, ("\0scope", *path)))
                    scope_saved[path] = scope_saved.get(path, 0) + _nbytes(var.aval)
    kernels = {"forward": 0, "backward": 0, "mixed": 0}
    hlo_phases = {"forward": 0, "backward": 0}
    if compiled is not None:
        fusion_phase = {(f.computation, f.name): f.phase for f in compiled.fusions}
        for instr in compiled.kernels:
            node_phase = _phase_of(fusion_phase, instr)
            kernels[node_phase] = kernels.get(node_phase, 0) + 1
        for phase in compiled.phases.values():
            hlo_phases[phase] = hlo_phases.get(phase, 0) + 1
    return Gradient(
        argnums=tuple(argnums),
        # ops as everywhere (traced_ops): a nested call's wrapper equation is no op
        forward_ops=sum(1 for e in traced.eqns if e.phase == "forward" and not e.is_call),
        backward_ops=sum(1 for e in traced.eqns if e.phase == "backward" and not e.is_call),
        recompute_ops=sum(1 for e in traced.eqns if e.recompute),
        kernels=kernels,
        residuals=list(residuals.values()),
        hlo_phases=hlo_phases,
        pairs=_pairs(traced, saved) + _scope_pairs(traced, chains, scope_saved),
    )


def _shared_calls(forward: tuple[str, ...], backward: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The forward call paths that hold a forward value and, marked backward, its reader
    (calls around the whole gradient, e.g. an ``update`` calling ``jax.grad``, hold both
    unmarked and pair nothing)."""
    out = []
    for k, (f, b) in enumerate(zip(forward, backward, strict=False)):
        if b == f + BACKWARD:
            out.append(forward[: k + 1])
        elif b != f or f.endswith(BACKWARD):
            break
    return out


def _unmarked(label: str) -> str:
    return label[: -len(BACKWARD)] if label.endswith(BACKWARD) else label


def _pairs(traced: Traced, saved: dict[tuple[str, ...], int]) -> list[tuple[str, str, int]]:
    """Every forward call that has a backward group, named by its label where that is unique
    among them (``block#3``), else by its call path (``loss#1/block#3/gelu``)."""
    mirrored: set[tuple[str, ...]] = set()
    for e in traced.eqns:
        for k, label in enumerate(e.calls):
            if label.endswith(BACKWARD):
                mirrored.add(tuple(_unmarked(c) for c in e.calls[: k + 1]))
    order: dict[tuple[str, ...], None] = {}
    for e in traced.eqns:
        for k, label in enumerate(e.calls):
            if label.endswith(BACKWARD):
                break
            path = e.calls[: k + 1]
            if path in mirrored:
                order.setdefault(path, None)
    return _named_pairs(order, saved)


Chain = tuple[tuple[str, str], ...]  # (label, kind) of each group from the root down


def _group_chains(graph: Any) -> dict[str | None, Chain]:
    """Group id -> the (label, kind) of it and the groups around it, outermost first."""
    by_id = {g.id: g for g in graph.groups}
    out: dict[str | None, Chain] = {None: ()}

    def chain(gid: str | None) -> Chain:
        if gid not in out:
            g = by_id.get(gid or "")
            out[gid] = (*chain(g.parent), (g.label, g.kind)) if g is not None else ()
        return out[gid]

    for g in graph.groups:
        chain(g.id)
    return out


def _shared_scopes(forward: Chain, backward: Chain) -> list[tuple[str, ...]]:
    """The forward module groups (label paths) that hold a forward value and, as their
    ``(backward)`` group, its reader."""
    out = []
    for k, ((f, kind), (b, _)) in enumerate(zip(forward, backward, strict=False)):
        if b == f + BACKWARD:
            if kind == "scope":
                out.append(tuple(label for label, _ in forward[: k + 1]))
        elif b != f or f.endswith(BACKWARD):
            break
    return out


def _scope_pairs(
    traced: Traced, chains: dict[str | None, Chain], saved: dict[tuple[str, ...], int]
) -> list[tuple[str, str, int]]:
    """Every module group (``Linear_0``) that has a ``(backward)`` group, in forward program
    order, named by its label where that is unique among them, else by its group path."""
    mirrored: set[tuple[str, ...]] = set()
    for chain in chains.values():
        if chain and chain[-1][1] == "scope" and chain[-1][0].endswith(BACKWARD):
            mirrored.add(tuple(_unmarked(label) for label, _ in chain))
    if not mirrored:
        return []
    order: dict[tuple[str, ...], None] = {}
    for e in traced.eqns:
        if e.phase == "backward":
            continue
        chain = chains.get(e.node.group, ())
        for k, (label, kind) in enumerate(chain):
            if label.endswith(BACKWARD):
                break
            path = tuple(lb for lb, _ in chain[: k + 1])
            if kind == "scope" and path in mirrored:
                order.setdefault(path, None)
    return _named_pairs(order, saved)


def _phase_of(fusion_phase: dict[tuple[str, str], str | None], instr: Any) -> str:
    key = (instr.computation, instr.name)
    if key in fusion_phase:
        return fusion_phase[key] or "forward"
    return op_name_phase(instr.op_name) or "forward"


def _named_pairs(
    order: dict[tuple[str, ...], None], saved: dict[tuple[str, ...], int]
) -> list[tuple[str, str, int]]:
    """(forward, backward, residual bytes) per group, in program order: named by the group's
    label where it is unique, else by its path (``loss#1/block#3/gelu``)."""
    labels: dict[str, int] = {}
    for path in order:
        labels[path[-1]] = labels.get(path[-1], 0) + 1
    out = []
    for path in order:
        name = path[-1] if labels[path[-1]] == 1 else "/".join(path)
        out.append((name, name + BACKWARD, saved.get(path, 0)))
    return out
