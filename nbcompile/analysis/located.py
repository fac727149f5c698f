"""Per-line results for every contributing cell and user file, keyed by Location.

``line_maps`` builds, in one pass over the traced and compiled graphs, what the Source tab shows
next to each line: the traced ops, the fusions and other kernels that came from it, and its
share of the program's cost. Lines of the compiling cell keep their plain numbers as keys
(``Analysis.lines``); lines of every other cell or user file are keyed by their
:class:`~nbcompile.capture.source.Location` (``Analysis.located``), and ``sources`` carries
their text so the view can show them.

``locations_of`` / ``modules_of`` are the one way to key any per-kernel result (profile time,
memory) by source: a kernel's name (an HLO instruction, as XLA and the profiler name it) ->
its locations / module paths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..capture.source import CellFiles, Location
from .lines import Locator

if TYPE_CHECKING:
    from .compiled import CompiledInfo
    from .core import Analysis
    from .traced import Traced

__all__ = ["line_maps", "locations_of", "modules_of", "source_texts"]

#: lines of one user file shown at most (a cell is never that long)
MAX_SOURCE_LINES = 5000


def locations_of(analysis: Analysis, kernel: str) -> list[Location]:
    """Where kernel ``kernel`` (an HLO instruction name such as ``fusion.12`` or
    ``ynn_fusion.6``) came from: the nearest user frame of each of its ops, sorted. Empty for a
    name the program does not have or a kernel without source metadata."""
    sites = analysis.kernel_sites.get(kernel)
    return list(sites[1]) if sites else []


def modules_of(analysis: Analysis, kernel: str) -> list[str]:
    """Module paths (``MLP/hidden``) of kernel ``kernel``'s ops, sorted (empty when none)."""
    return list(analysis.kernel_modules.get(kernel, []))


def _entry() -> dict[str, Any]:
    # cost_share: XLA's per-kernel costs split over lines by nbcompile
    return {"fusions": [], "nodes": [], "kernels": [], "cost_share": 0.0, "from": "estimate"}


def line_maps(
    traced: Traced, info: CompiledInfo | None, locator: Locator
) -> tuple[dict[int, dict], dict[Location, dict]]:
    """(compiling-cell line -> entry, other Location -> entry); an entry lists the traced
    ``nodes``, the ``fusions`` and other ``kernels`` of that line and its ``cost_share`` (of
    flops, or of bytes where no kernel has flops): shares add up to at most 1 within each of
    the two maps."""
    lines: dict[int, dict[str, Any]] = {}
    located: dict[Location, dict[str, Any]] = {}

    def elsewhere(location: Location | None) -> bool:
        return location is not None and not (
            location.file == locator.filename or locator.is_cell_file(location.file)
        )

    for node in traced.graph.nodes:
        if node.kind not in ("op", "call"):
            continue
        if node.line is not None:
            lines.setdefault(node.line, _entry())["nodes"].append(node.id)
        if elsewhere(node.location):
            located.setdefault(node.location, _entry())["nodes"].append(node.id)
    if info is None:
        return lines, located
    use = (
        "flops"
        if any((c.get("flops") or 0) > 0 for c in info.unit_costs.values())
        else "bytes accessed"
    )
    total = sum((c.get(use) or 0.0) for c in info.unit_costs.values())
    fusion_names = {f.name for f in info.fusions}
    weights: dict[int, float] = {}
    located_weights: dict[Location, float] = {}
    for node in info.graph.nodes:
        if node.kind in ("param", "const", "output"):
            continue
        sites = info.sites.get(node.label)
        if sites is None:
            continue
        node_lines, node_locations = sites
        others = [loc for loc in node_locations if elsewhere(loc)]
        which = "fusions" if node.label in fusion_names else "kernels"
        for line in node_lines:
            lines.setdefault(line, _entry())[which].append(node.label)
        for loc in others:
            located.setdefault(loc, _entry())[which].append(node.label)
        cost = info.unit_costs.get(node.label)
        if not cost or node.group is not None:
            continue
        amount = cost.get(use) or 0.0
        for line in node_lines:
            weights[line] = weights.get(line, 0.0) + amount / len(node_lines)
        for loc in others:
            located_weights[loc] = located_weights.get(loc, 0.0) + amount / len(others)
    for line, weight in weights.items():
        lines[line]["cost_share"] = weight / total if total else 0.0
    for loc, weight in located_weights.items():
        located[loc]["cost_share"] = weight / total if total else 0.0
    return lines, located


def source_texts(located: dict[Location, Any], cells: CellFiles) -> list[dict[str, Any]]:
    """The text of every cell and user file that ``located`` refers to, cells first (by
    execution count), then files. ``key_prefix`` + line number is the line's key in the
    report's ``lines`` map."""
    first: dict[str, Location] = {}
    for loc in located:
        first.setdefault(loc.file, loc)
    out = []
    for file, loc in sorted(first.items(), key=lambda item: item[1].sort_key()):
        text = cells.lines(file)
        out.append(
            {
                "cell": loc.cell,
                "file": file,
                "label": loc.source_label,
                "key_prefix": loc.label[: len(loc.label) - len(str(loc.line))],
                "lines": text[:MAX_SOURCE_LINES],
                "truncated": len(text) > MAX_SOURCE_LINES,
            }
        )
    return out
