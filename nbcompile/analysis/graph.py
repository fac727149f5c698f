"""The graph data model shared by the traced and compiled views (docs/report-schema.md, Graph).

Structure (nodes, edges, groups) is kept apart from overlays: analysis results such as the
fusion a node landed in, its gradient phase or its flops are plain keys on the node, filled in
after the structure is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..capture.source import Location

__all__ = ["Edge", "Graph", "Group", "Node"]

NODE_KINDS = ("op", "param", "const", "output", "fusion", "call")
GROUP_KINDS = (
    "function",
    "module",
    "scope",
    "loop",
    "branch",
    "custom",
    "remat",
    "shard_map",
    "fusion",
)


@dataclass(slots=True)
class Node:
    id: str
    op: str
    label: str
    kind: str = "op"
    shape: str = ""
    bytes: int = 0
    group: str | None = None
    line: int | None = None
    file: str | None = None
    file_line: int | None = None
    path: str = ""
    fusion: str | None = None
    phase: str | None = None
    flops: float | None = None
    folded: bool = False
    location: Location | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = {
            "id": self.id,
            "op": self.op,
            "label": self.label,
            "kind": self.kind,
            "shape": self.shape,
            "bytes": self.bytes,
            "group": self.group,
            "line": self.line,
            "file": self.file,
            "file_line": self.file_line,
            "path": self.path,
            "fusion": self.fusion,
            "phase": self.phase,
            "flops": self.flops,
            "folded": self.folded,
        }
        if self.location is not None:
            out["loc"] = self.location.label
            if self.location.detail:
                out["detail"] = self.location.detail
        out.update(self.extra)
        return out


@dataclass(slots=True)
class Edge:
    src: str
    dst: str
    bytes: int = 0
    shape: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"src": self.src, "dst": self.dst, "bytes": self.bytes, "shape": self.shape}


@dataclass(slots=True)
class Group:
    id: str
    label: str
    kind: str
    parent: str | None = None
    call: str | None = None  # "call" (the user's function) | "library" (a library call) | None

    def to_json(self) -> dict[str, Any]:
        out = {"id": self.id, "label": self.label, "kind": self.kind, "parent": self.parent}
        if self.call:
            out["call"] = self.call
        return out


@dataclass
class Graph:
    """Nodes, edges and (nested) groups of one program. Node ids are unique within the graph."""

    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)
    _group_keys: dict[tuple[str | None, str, str], str] = field(default_factory=dict, repr=False)
    _by_id: dict[str, Node] = field(default_factory=dict, repr=False)
    #: id(jaxpr equation) -> node id, for overlays computed per equation (e.g. --debug values)
    eqn_nodes: dict[int, str] = field(default_factory=dict, repr=False)

    def add_node(self, op: str, kind: str = "op", prefix: str = "n", **fields: Any) -> Node:
        node = Node(
            id=f"{prefix}{len(self.nodes)}",
            op=op,
            label=fields.pop("label", op),
            kind=kind,
            **fields,
        )
        self.nodes.append(node)
        self._by_id[node.id] = node
        return node

    def add_edge(self, src: str, dst: str, nbytes: int = 0, shape: str = "") -> None:
        self.edges.append(Edge(src, dst, nbytes, shape))

    def group(
        self,
        parent: str | None,
        label: str,
        kind: str,
        unique: bool = False,
        call: str | None = None,
    ) -> str:
        """The id of the group ``label`` under ``parent``; created on first use. ``unique``
        always creates a fresh group (e.g. one per loop body). ``call``: the group is one of
        the user's calls (``"call"``) or a library call made from their code (``"library"``)."""
        key = (parent, label, kind)
        if not unique and key in self._group_keys:
            return self._group_keys[key]
        gid = f"g{len(self.groups)}"
        self.groups.append(Group(gid, label, kind, parent, call))
        if not unique:
            self._group_keys[key] = gid
        return gid

    def node(self, node_id: str) -> Node | None:
        return self._by_id.get(node_id)

    def count(self, kind: str) -> int:
        return sum(1 for n in self.nodes if n.kind == kind)

    def to_json(self) -> dict[str, Any]:
        return {
            "nodes": [n.to_json() for n in self.nodes],
            "edges": [e.to_json() for e in self.edges],
            "groups": [g.to_json() for g in self.groups],
        }
