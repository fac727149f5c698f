"""Forward vs backward in a ``value_and_grad`` program, and the residuals between them.

Every jaxpr equation gets a phase from its name stack (``jvp(...)`` forward,
``transpose(jvp(...))`` backward); equations inside nested programs inherit their caller's;
equations with neither (code around the gradient, e.g. an optimiser update) are backward when
they read a backward value and forward otherwise. Remat recomputation (``rematted_computation``)
runs in the backward pass and is counted there, flagged ``recompute``. HLO instructions are
classified the same way from ``op_name``; a fusion holding both is ``mixed``.

A *residual* is a value produced by a forward equation and read by a backward one: what the
forward pass must keep alive for the backward pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import _jax
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
    for info in traced.eqns:
        if info.phase != "backward":
            continue
        for var in info.invars:
            if _jax.is_literal(var) or var in residuals:
                continue
            src = producer.get(var)
            if src is not None and src.phase == "forward":
                residuals[var] = Residual(
                    _short(var.aval), _nbytes(var.aval), src.node.line, src.primitive, src.node.id
                )
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
        forward_ops=sum(1 for e in traced.eqns if e.phase == "forward"),
        backward_ops=sum(1 for e in traced.eqns if e.phase == "backward"),
        recompute_ops=sum(1 for e in traced.eqns if e.recompute),
        kernels=kernels,
        residuals=list(residuals.values()),
        hlo_phases=hlo_phases,
    )


def _phase_of(fusion_phase: dict[tuple[str, str], str | None], instr: Any) -> str:
    key = (instr.computation, instr.name)
    if key in fusion_phase:
        return fusion_phase[key] or "forward"
    return op_name_phase(instr.op_name) or "forward"
