"""What the compiled program's kernels are, read from a Compilation's public analysis.

For every kernel XLA emits (each fusion and each op left unfused, in the entry computation and in
loop bodies): its HLO name (what the profiler's events are called), opcode, XLA's flops and
bytes per execution, the source locations and cell lines it came from and its module paths.

:func:`places` is the ONE place where a kernel's location keys are chosen: every per-line figure
of the profile (``by_line``) is keyed by what it returns, in the form ``Fusion.locations`` uses
(``(file, line)`` of each member op's innermost user frame), so per-line time and the fusions'
lines always agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CONTAINERS",
    "KernelInfo",
    "kernels_of",
    "location_json",
    "location_label",
    "module_name",
    "places",
]

#: Control-flow kernels: their profiler events enclose their bodies' kernels.
CONTAINERS = frozenset({"while", "conditional", "call"})
_NOT_KERNELS = frozenset({"param", "const", "output"})


@dataclass
class KernelInfo:
    """One kernel. ``flops`` / ``bytes`` are per execution (None where nothing reports them);
    ``cost_source`` is ``"XLA"`` (XLA's cost model) or ``"shapes"`` (estimated from shapes)."""

    name: str
    opcode: str
    flops: float | None = None
    bytes: float | None = None
    cost_source: str | None = None
    locations: list[Any] = field(default_factory=list)
    cell_lines: list[int] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)  # the user's call paths
    shares: Any | None = None  # analysis.shares.Shares: cost-weighted split (None: even)

    @property
    def container(self) -> bool:
        return self.opcode in CONTAINERS


def places(fusion: Any = None, node: Any = None) -> tuple[list[Any], list[int]]:
    """Location keys and visible cell lines of a kernel, from its Fusion (or, for a kernel that
    is not a fusion, its compiled-graph node). Switch the location form here and only here."""
    if fusion is not None:
        return list(fusion.locations), list(fusion.source_lines)
    if node is not None:
        loc = getattr(node, "location", None)
        if loc is None and node.file and node.file_line:
            loc = (node.file, node.file_line)
        return ([loc] if loc is not None else []), ([node.line] if node.line else [])
    return [], []


def location_json(loc: Any) -> Any:
    """A location key as JSON (``Location.to_json()``, or ``[file, line]``)."""
    if hasattr(loc, "to_json"):
        return loc.to_json()
    return list(loc) if isinstance(loc, tuple) else str(loc)


def location_label(loc: Any) -> str:
    """``In [3] line 7`` / ``model.py:12`` for people."""
    label = getattr(loc, "label", None)
    if isinstance(label, str):
        return label
    if isinstance(loc, tuple) and len(loc) == 2:
        return f"{str(loc[0]).rsplit('/', 1)[-1]}:{loc[1]}"
    return str(loc)


def _figure(cost: dict[str, Any] | None, key: str) -> float | None:
    value = (cost or {}).get(key)
    return float(value) if isinstance(value, int | float) and value >= 0 else None


def kernels_of(c: Any) -> dict[str, KernelInfo]:
    """Every kernel of ``c`` (a Compilation) by HLO name."""
    analysis = c.analysis
    costs: dict[str, dict[str, Any]] = analysis.kernel_costs or {}
    fusions = {f.name: f for f in c.fusions}
    out: dict[str, KernelInfo] = {}
    graph = analysis.compiled_graph
    for node in graph.nodes if graph is not None else ():
        if node.kind in _NOT_KERNELS:
            continue
        name = node.label
        fusion = fusions.get(name)
        opcode = str(node.extra.get("opcode") or node.op)
        info = KernelInfo(name, opcode)
        cost = costs.get(name)
        if cost is not None and opcode not in CONTAINERS:
            info.flops, info.bytes = _figure(cost, "flops"), _figure(cost, "bytes accessed")
            info.cost_source = "XLA" if cost.get("source") == "xla" else "shapes"
        elif fusion is not None:  # a fusion inside a loop body: costed by the analysis too
            info.flops, info.bytes = fusion.flops, fusion.bytes
            info.cost_source = "XLA" if fusion.flops is not None else None
        info.locations, info.cell_lines = places(fusion, None if fusion else node)
        if fusion is not None:
            info.modules = list(fusion.modules)
        elif node.path:
            info.modules = [node.path]
        info.functions = list(getattr(analysis, "kernel_functions", {}).get(name, []))
        info.shares = getattr(analysis, "kernel_shares", {}).get(name)
        out[name] = info
    return out


def module_name(hlo: str | None) -> str | None:
    """The HLO module's name (``jit_block``): the profiler's ``hlo_module`` stat."""
    m = re.match(r"\s*HloModule\s+([^\s,]+)", hlo or "")
    return m.group(1) if m else None
