"""What changed between two analyses: ops, fusions, folded constants, cost, signature.

Ops and fusions are matched by (module path, primitive / fusion ops, source location), so a renamed
HLO instruction (``fusion.3`` -> ``fusion.4``) is not a change but an edited line is.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..capture.source import cell_identity

if TYPE_CHECKING:
    from .core import Analysis

__all__ = ["Diff", "diff"]


@dataclass
class Diff:
    ops_added: list[dict[str, Any]] = field(default_factory=list)
    ops_removed: list[dict[str, Any]] = field(default_factory=list)
    fusions_added: list[dict[str, Any]] = field(default_factory=list)
    fusions_removed: list[dict[str, Any]] = field(default_factory=list)
    folded_added: list[dict[str, Any]] = field(default_factory=list)
    folded_removed: list[dict[str, Any]] = field(default_factory=list)
    signature: dict[str, Any] | None = None
    cost: dict[str, dict[str, float | None]] = field(default_factory=dict)
    summary: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return any(
            (
                self.ops_added,
                self.ops_removed,
                self.fusions_added,
                self.fusions_removed,
                self.folded_added,
                self.folded_removed,
                self.signature,
                self.cost,
            )
        )

    @property
    def lines(self) -> list[int]:
        """Source lines touched by any op or fusion change."""
        found = {item.get("line") for item in self.ops_added + self.ops_removed}
        for item in self.fusions_added + self.fusions_removed:
            found.update(item.get("lines", []))
        return sorted(line for line in found if line is not None)

    def to_json(self) -> dict[str, Any]:
        return {
            "changed": self.changed,
            "lines": self.lines,
            "ops": {"added": self.ops_added, "removed": self.ops_removed},
            "fusions": {"added": self.fusions_added, "removed": self.fusions_removed},
            "folded": {"added": self.folded_added, "removed": self.folded_removed},
            "signature": self.signature,
            "cost": self.cost,
            "summary": self.summary,
        }

    def text(self) -> str:
        if not self.changed:
            return "no changes"
        out = []
        for sign, items in (("+", self.ops_added), ("-", self.ops_removed)):
            for it in items:
                out.append(
                    f"{sign} op {it['op']} {it['shape']} at line {it['line']} ({it['path']})"
                )
        for sign, items in (("+", self.fusions_added), ("-", self.fusions_removed)):
            for it in items:
                out.append(
                    f"{sign} fusion {it['kind']} [{', '.join(it['ops'][:6])}] lines {it['lines']}"
                )
        for sign, items in (("+", self.folded_added), ("-", self.folded_removed)):
            for it in items:
                out.append(f"{sign} folded {it['what']} ({it['bytes']} bytes)")
        if self.signature:
            out.append(f"signature: {self.signature['before']} -> {self.signature['after']}")
        for key, change in self.cost.items():
            out.append(f"{key}: {change['before']} -> {change['after']}")
        return "\n".join(out)


def _where(file: str | None, line: int | None) -> tuple:
    # a cell by its content hash and line, not its label: a re-run cell has a new number
    return (cell_identity(file) if file else None, line)


def _op_key(node: dict[str, Any]) -> tuple:
    # the compiling cell's line where there is one (its file name changes with every run),
    # else the location in the cell or file that defines the op
    where = _where(node["file"], node["file_line"]) if node["line"] is None else ()
    return (node["path"], node["op"], node["line"], where, node["shape"])


def _fusion_key(f: dict[str, Any]) -> tuple:
    where = () if f["lines"] else tuple(_where(loc["file"], loc["line"]) for loc in f["locations"])
    return (tuple(f["modules"]), f["kind"], tuple(sorted(f["ops"])), tuple(f["lines"]), where)


def _compare(before: list[dict], after: list[dict], key: Any) -> tuple[list, list]:
    a, b = Counter(key(i) for i in before), Counter(key(i) for i in after)
    added, removed = b - a, a - b
    out_added, out_removed = [], []
    for item in after:
        if added[key(item)] > 0:
            added[key(item)] -= 1
            out_added.append(item)
    for item in before:
        if removed[key(item)] > 0:
            removed[key(item)] -= 1
            out_removed.append(item)
    return out_added, out_removed


def _signature(a: Analysis) -> list[str]:
    g = a.traced_graph
    return (
        [n.shape for n in g.nodes if n.kind == "param" and n.group is None]
        + ["->"]
        + [n.shape for n in g.nodes if n.kind == "output"]
    )


def diff(a: Analysis, b: Analysis) -> Diff:
    """What changed from analysis ``a`` (before) to ``b`` (after)."""
    ops_a = [n.to_json() for n in a.traced_graph.nodes if n.kind in ("op", "call")]
    ops_b = [n.to_json() for n in b.traced_graph.nodes if n.kind in ("op", "call")]
    d = Diff()
    d.ops_added, d.ops_removed = _compare(ops_a, ops_b, _op_key)
    fa, fb = [f.to_json() for f in a.fusions], [f.to_json() for f in b.fusions]
    d.fusions_added, d.fusions_removed = _compare(fa, fb, _fusion_key)
    ka, kb = [f.to_json() for f in a.folded], [f.to_json() for f in b.folded]
    d.folded_added, d.folded_removed = _compare(
        ka, kb, lambda f: (f["what"], f["stage"], f["bytes"], f["line"], f["folded"])
    )
    sa, sb = _signature(a), _signature(b)
    if sa != sb:
        d.signature = {"before": " ".join(sa), "after": " ".join(sb)}
    for key in ("flops", "bytes_accessed", "transcendentals"):
        va, vb = (a.cost or {}).get(key), (b.cost or {}).get(key)
        if va != vb:
            d.cost[key] = {"before": va, "after": vb}
    sum_a, sum_b = a.summary(), b.summary()
    d.summary = {
        k: {"before": sum_a.get(k), "after": sum_b.get(k)}
        for k in sum_a
        if sum_a.get(k) != sum_b.get(k)
    }
    return d
