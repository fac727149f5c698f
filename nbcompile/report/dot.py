"""Graph JSON -> Graphviz DOT (the ``graphviz`` Python package; no system ``dot`` needed).

For users who want the graph in their own tools: ``c.to_dot()`` returns a
``graphviz.Digraph`` whose ``.source`` is DOT text; ``.render()`` / ``.pipe()`` need a system
Graphviz, which nbcompile's own views never do. Groups become clusters; parameters and scalar
constants are drawn as small plain-text nodes; the node count is capped (real HLO graphs are
slow to lay out with ``dot``: see docs/benchmarks.md).
"""

from __future__ import annotations

from typing import Any

MAX_NODES = 2000


def to_dot(graph: dict[str, Any], *, name: str = "nbcompile", max_nodes: int = MAX_NODES) -> Any:
    """A ``graphviz.Digraph`` of a report graph (``report["graphs"]["traced"]`` etc.)."""
    import graphviz

    dot = graphviz.Digraph(
        name=name,
        graph_attr={"rankdir": "TB", "nslimit": "2", "nslimit1": "2", "fontsize": "10"},
        node_attr={"shape": "box", "fontsize": "9", "height": "0.2"},
    )
    nodes = graph.get("nodes", [])[:max_nodes]
    keep = {n["id"] for n in nodes}
    children: dict[str | None, list[dict[str, Any]]] = {}
    for n in nodes:
        children.setdefault(n.get("group"), []).append(n)
    groups = {g["id"]: g for g in graph.get("groups", [])}
    sub_groups: dict[str | None, list[str]] = {}
    for gid, g in groups.items():
        sub_groups.setdefault(g.get("parent"), []).append(gid)

    def add(container: Any, group: str | None) -> None:
        for n in children.get(group, []):
            label = n.get("label") or n.get("op") or n["id"]
            if n.get("shape"):
                label += f"\\n{n['shape']}"
            if n.get("line"):
                label += f"  (line {n['line']})"
            plain = n.get("kind") in ("param", "const")
            container.node(n["id"], label, shape="plaintext" if plain else "box")
        for gid in sub_groups.get(group, []):
            with container.subgraph(name=f"cluster_{gid}") as sub:
                sub.attr(label=str(groups[gid].get("label", gid)), style="rounded")
                add(sub, gid)

    add(dot, None)
    for e in graph.get("edges", []):
        if e["src"] in keep and e["dst"] in keep:
            dot.edge(e["src"], e["dst"])
    if len(graph.get("nodes", [])) > max_nodes:
        dot.attr(label=f"first {max_nodes} of {len(graph['nodes'])} nodes")
    return dot
