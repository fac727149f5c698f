"""``analyse(artifacts) -> Analysis``: the program as trustworthy data.

One pass over each artifact: the jaxpr is walked once (traced graph, phases, analytic cost),
the optimised HLO text is parsed once (fusions, kernels, compiled graph, per-kernel XLA cost),
and the pre-optimisation HLO is parsed only when it is needed (op count and constant folding).
Anything a backend cannot give stays None, and a note says why.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .._compat import stablehlo_ops
from .artifacts import Artifacts
from .compiled import CompiledInfo, Fusion, analyse_compiled
from .cost import analytic_cost, normalise_cost, normalise_memory
from .folding import Folded, find_folded, has_const_candidates
from .gradient import Gradient, analyse_gradient
from .graph import Graph
from .hlo import HloModule, HloParseError, count_instructions, parse_hlo
from .lines import LineMap
from .traced import Traced, trace_graph

__all__ = ["Analysis", "analyse"]


@dataclass
class Analysis:
    """Everything nbcompile knows about one compile. See docs/report-schema.md for to_json()."""

    traced_graph: Graph
    compiled_graph: Graph | None
    fusions: list[Fusion]
    folded: list[Folded]
    gradient: Gradient | None
    cost: dict[str, float | None] | None
    memory: dict[str, float | None] | None
    analytic: dict[str, float]
    lines: dict[int, dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    collectives: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, int | None] = field(default_factory=dict)
    kernel_costs: dict[str, dict[str, float]] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        cost = self.cost or {}
        flops = cost.get("flops")
        nbytes = cost.get("bytes_accessed")
        return {
            **self.counts,
            "fusions": len(self.fusions),
            "folded_constants": sum(1 for f in self.folded if f.folded),
            "flops": flops if flops is not None else self.analytic.get("flops"),
            "bytes_accessed": nbytes,
            "transcendentals": cost.get("transcendentals"),
            "analytic_flops": self.analytic.get("flops"),
            "analytic_bytes": self.analytic.get("bytes_accessed"),
            "bytes_saved_by_fusion": sum(f.bytes_saved for f in self.fusions),
            "residual_bytes": self.gradient.residual_bytes if self.gradient else None,
            "collectives": len(self.collectives),
            "peak_bytes": (self.memory or {}).get("peak_bytes"),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "summary": self.summary(),
            "graphs": {"traced": self.traced_graph.to_json(),
                       "compiled": self.compiled_graph.to_json() if self.compiled_graph else None},
            "fusions": [f.to_json() for f in self.fusions],
            "folded": [f.to_json() for f in self.folded],
            "gradient": self.gradient.to_json() if self.gradient else None,
            "cost": self.cost, "memory": self.memory, "analytic": self.analytic,
            "lines": {str(k): v for k, v in sorted(self.lines.items())},
            "collectives": self.collectives, "notes": list(self.notes),
        }  # fmt: skip


def _pre_optimisation_text(lowered: Any, notes: list[str]) -> str | None:
    try:
        return lowered.compiler_ir("hlo").as_hlo_module().to_string()
    except Exception as err:  # the backend cannot give pre-optimisation HLO
        notes.append(f"pre-optimisation HLO unavailable ({type(err).__name__})")
    return None


def _pre_optimisation(text: str | None, notes: list[str]) -> HloModule | None:
    """Parsed only when folding has candidates to check (parsing a big module costs ~0.1 s)."""
    if text is None:
        return None
    try:
        return parse_hlo(text)
    except HloParseError as err:
        notes.append(f"pre-optimisation HLO could not be parsed ({err}); folding not checked")
    return None


def _optimised(artifacts: Artifacts, notes: list[str]) -> HloModule | None:
    text = artifacts.hlo_text
    if text is None and artifacts.compiled is not None:
        try:
            text = artifacts.compiled.as_text()
        except Exception:  # some backends cannot print
            text = None
    if text is None:
        notes.append("no optimised HLO: the program was not compiled for this backend")
        return None
    try:
        return parse_hlo(text)
    except HloParseError as err:
        notes.append(f"optimised HLO could not be parsed ({err}); compiled view unavailable")
        return None


def _static_cost_estimate(unit_costs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Sum of the per-kernel HLO cost analysis (used where ``cost_analysis()`` gives nothing,
    e.g. deviceless GPU compiles). ``estimate`` marks it as such in every view."""
    def total(key: str) -> float:
        return float(sum(c.get(key) or 0.0 for c in unit_costs.values()))

    return {"flops": total("flops"), "bytes_accessed": total("bytes accessed"),
            "transcendentals": total("transcendentals"), "optimal_seconds": None,
            "estimate": "static"}  # fmt: skip


def _call(obj: Any, method: str) -> Any:
    try:
        return getattr(obj, method)()
    except Exception:  # XLA's analyses are best-effort and raise on some backends
        return None


def _stablehlo_ops(lowered: Any) -> int | None:
    try:
        return stablehlo_ops(lowered.compiler_ir("stablehlo"))[0]
    except Exception:
        return None


def _line_map(traced: Traced, info: CompiledInfo | None) -> dict[int, dict[str, Any]]:
    lines: dict[int, dict[str, Any]] = {}

    def entry(line: int) -> dict[str, Any]:
        return lines.setdefault(
            line, {"fusions": [], "nodes": [], "kernels": [], "cost_share": 0.0}
        )

    for node in traced.graph.nodes:
        if node.line is not None and node.kind in ("op", "call"):
            entry(node.line)["nodes"].append(node.id)
    if info is None:
        return lines
    weights: dict[int, float] = {}
    use = (
        "flops"
        if any((c.get("flops") or 0) > 0 for c in info.unit_costs.values())
        else "bytes accessed"
    )
    fusion_of = {f.name: f for f in info.fusions}
    for node in info.graph.nodes:
        fusion = fusion_of.get(node.label) if node.kind == "fusion" else None
        node_lines = fusion.source_lines if fusion else ([node.line] if node.line else [])
        for line in node_lines:
            item = entry(line)
            (item["fusions"] if fusion else item["kernels"]).append(node.label)
        cost = info.unit_costs.get(node.label)
        if cost and node_lines and node.group is None:
            for line in node_lines:
                weights[line] = weights.get(line, 0.0) + (cost.get(use) or 0.0) / len(node_lines)
    total = sum((c.get(use) or 0.0) for c in info.unit_costs.values())
    for line, weight in weights.items():
        lines[line]["cost_share"] = weight / total if total else 0.0
    return lines


def _overlay_fusions(traced: Traced, fusions: list[Fusion]) -> None:
    """Best match of each traced op to the fusion its (primitive, line) landed in."""
    where: dict[tuple[str, int | None], str] = {}
    for fusion in fusions:
        prims = {n.split(";", 1)[0].rsplit("/", 1)[-1] for n in fusion.op_names}
        for prim in prims:
            for line in fusion.source_lines or [None]:
                where.setdefault((prim, line), fusion.name)
    for node in traced.graph.nodes:
        if node.kind == "op":
            node.fusion = where.get((node.op, node.line))


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Analysis allocates ~10^5 small acyclic objects; the cyclic collector would walk the
    whole heap (JAX's included) several times meanwhile (20-60 ms on a 12-layer train step)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def analyse(artifacts: Artifacts) -> Analysis:
    """Analyse one compile: graphs, fusions, folding, gradient, cost, per-line map."""
    with _gc_paused():
        return _analyse(artifacts)


def _analyse(artifacts: Artifacts) -> Analysis:
    notes: list[str] = []
    grad = artifacts.grad_argnums is not None
    source = LineMap(artifacts.source)
    traced = trace_graph(artifacts.closed_jaxpr, source, artifacts.name, grad=grad)
    post = _optimised(artifacts, notes)
    info = analyse_compiled(post, source, grad) if post is not None else None
    pre_text = (_pre_optimisation_text(artifacts.lowered, notes)
                if artifacts.lowered is not None else None)  # fmt: skip
    # the pre-optimisation module is parsed only when folding has candidates to check
    pre = (_pre_optimisation(pre_text, notes)
           if pre_text is not None and has_const_candidates(traced) else None)  # fmt: skip
    folded = find_folded(traced, pre, post, source, artifacts.fn)
    gradient = analyse_gradient(artifacts.grad_argnums, traced, info) if grad else None
    compiled = artifacts.compiled
    cost = normalise_cost(_call(compiled, "cost_analysis")) if compiled is not None else None
    memory = normalise_memory(_call(compiled, "memory_analysis")) if compiled is not None else None
    if cost is None and info is not None and info.unit_costs:
        cost = _static_cost_estimate(info.unit_costs)
        notes.append("XLA reports no cost for this backend: flops/bytes are static estimates "
                     "from XLA's HLO cost analysis of the optimised program (no timing model)")
    if info is not None:
        _overlay_fusions(traced, info.fusions)
    counts = {
        "jaxpr_eqns": len(traced.eqns),
        "stablehlo_ops": _stablehlo_ops(artifacts.lowered)
        if artifacts.lowered is not None
        else None,
        "hlo_ops_before": count_instructions(pre_text) if pre_text is not None else None,
        "hlo_ops_after": post.instruction_count() if post is not None else None,
        "kernels": len(info.kernels) if info is not None else None,
        "eager_kernels": traced.eager_kernels,
    }
    return Analysis(
        traced_graph=traced.graph,
        compiled_graph=info.graph if info is not None else None,
        fusions=info.fusions if info is not None else [],
        folded=folded, gradient=gradient, cost=cost, memory=memory,
        analytic=analytic_cost(traced.eqns),
        lines=_line_map(traced, info), notes=notes,
        collectives=info.collectives if info is not None else [],
        counts=counts,
        kernel_costs=info.unit_costs if info is not None else {},
    )  # fmt: skip
