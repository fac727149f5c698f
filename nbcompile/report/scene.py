"""What one graph view draws, as data: the port of ``js/scene.js`` for the static picture.

Visible boxes (nodes, collapsed groups, expanded groups as frames) laid out as nested layered
boxes (:mod:`.layout`), and every edge as a polyline running only between boxes: through the
bottom ports of its upper end's groups, across their lowest common box, and in through the top
ports of its lower end's groups. Same expansion rule, same box texts and sizes, same layout as
the widget (tests/widgets/test_layout_parity.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .graphmodel import Group, PreparedGraph, ancestors, fmt_num, top_ops, trunc
from .layout import BoxLayout, Ranked, bottom_port, edge_key, layout_box, rank, top_port

__all__ = [
    "CH",
    "HEADER",
    "LINE",
    "MAXW",
    "PAD",
    "Box",
    "Scene",
    "SceneEdge",
    "build_scene",
    "initial_expansion",
    "path_data",
]

CH = 6.7
LINE = 14
#: chunks (program-order slices of a flat program) open at first only within this many boxes
CHUNK_LIMIT = 40
PAD = 10
HEADER = 22
MAXW = 250


@dataclass
class Box:
    key: str
    node: dict[str, Any] | None = None
    group: Group | None = None
    children: list[Box] | None = None
    lines: list[str] = field(default_factory=list)
    x: float = 0.0
    y: float = 0.0
    w: float = 0.0
    h: float = 0.0
    dx: float = 0.0
    oy: float = 0.0
    title: str = ""
    ranked: Ranked | None = None
    ports: dict[str, list[str]] = field(default_factory=lambda: {"top": [], "bottom": []})
    inner: BoxLayout | None = None


@dataclass
class SceneEdge:
    u: str
    v: str
    count: int
    bytes: float
    box: str = "root"
    cu: list[str] = field(default_factory=list)
    cv: list[str] = field(default_factory=list)
    up: bool = False
    points: list[tuple[float, float]] = field(default_factory=list)


@dataclass
class Scene:
    root: Box
    boxes: dict[str, Box]
    edges: list[SceneEdge]
    unit_of: dict[str, str]


def initial_expansion(pg: PreparedGraph, limit: int, budget: int) -> set[str]:
    """Group ids expanded first: whole depth levels while they fit ``limit`` boxes."""
    expanded: set[str] = set()
    assert pg.root is not None
    level = [pg.root]
    count = len(pg.root.items)
    while level:
        groups = [pg.groups[iid] for g in level for typ, iid, _ in g.items if typ == "group"]
        extra = sum(len(g.items) - 1 for g in groups)
        cap = min(limit, CHUNK_LIMIT) if all(g.kind == "chunk" for g in groups) else limit
        if not groups or (
            count + extra > cap and not (len(groups) == 1 and count + extra <= budget)
        ):
            break
        expanded.update(g.id for g in groups)
        count += extra
        level = groups
    return expanded


def unit_key(pg: PreparedGraph, expanded: set[str], node_id: str) -> str:
    for gid in ancestors(pg, "n:" + node_id):
        if gid not in expanded:
            return "g:" + gid
    return "n:" + node_id


def _js_str(v: Any) -> str:
    """A number as JavaScript's template strings write it (7, not 7.0)."""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def leaf_text(pg: PreparedGraph, c: Box) -> tuple[list[str], float, float]:
    """Lines of text and size of a leaf box (``leafText``)."""
    if c.node is not None:
        n = c.node
        fusion = pg.fusion_by_id.get(n["fusion"]) if pg.is_compiled and n.get("fusion") else None
        ins = [pg.by_id[i].get("label") or i for i in pg.in_labels.get(n["id"], [])]
        where = (
            f" · L{_js_str(n['line'])}"
            if n.get("line") is not None
            else f" · {n['loc']}"
            if n.get("loc")
            else ""
        )
        shape = n.get("shape") or ""
        op = n.get("op")
        if fusion or n.get("kind") == "fusion":
            head = f"{n.get('label') or op}{' · ' + str(fusion.get('kind')) if fusion else ''}"
            lines = [head, "+".join((fusion or {}).get("ops") or []) or shape or "", shape + where]
        else:
            label = n.get("label")
            lines = [f"{op} {label}" if label and label != op else str(op), shape + where]
        if ins:
            lines.append("← " + ", ".join(ins[:3]) + (f" +{len(ins) - 3}" if len(ins) > 3 else ""))
    else:
        g = c.group
        assert g is not None
        lr = ""
        if g.line_min <= g.line_max:
            lr = f" · L{_js_str(g.line_min)}"
            if g.line_max > g.line_min:
                lr += "–" + _js_str(g.line_max)
        lines = [f"▸ {g.label}", f"{g.kind} · {fmt_num(g.count)} ops{lr}", ", ".join(top_ops(g, 3))]
    max_chars = math.floor((MAXW - 14) / CH)
    lines = [trunc(t, max_chars) for t in lines]
    w = min(MAXW, max(70, max(len(t) for t in lines) * CH + 14))
    return lines, w, len(lines) * LINE + 8


def build_scene(pg: PreparedGraph, expanded: set[str]) -> Scene:
    """The scene for ``expanded`` group ids (``buildScene``)."""
    unit_of = {
        n["id"]: unit_key(pg, expanded, n["id"]) for n in pg.nodes if n["id"] not in pg.labels
    }
    assert pg.root is not None
    tree = _build_tree(pg, expanded, pg.root, "root")
    agg: dict[str, SceneEdge] = {}
    for e in pg.edges:
        u, v = unit_of.get(e["src"]), unit_of.get(e["dst"])
        if not u or not v or u == v:
            continue
        k = edge_key(u, v)
        if k in agg:
            agg[k].count += 1
            agg[k].bytes += e.get("bytes") or 0
        else:
            agg[k] = SceneEdge(u, v, 1, e.get("bytes") or 0)
    edges = list(agg.values())
    box_edges: dict[str, list[tuple[str, str]]] = {}
    for a in edges:
        au, av = ancestors(pg, a.u), ancestors(pg, a.v)
        i = 0
        while i < len(au) and i < len(av) and au[i] == av[i]:
            i += 1
        a.box = "root" if i == 0 else "g:" + au[i - 1]
        a.cu = ["g:" + g for g in au[i:]] + [a.u]
        a.cv = ["g:" + g for g in av[i:]] + [a.v]
        box_edges.setdefault(a.box, []).append((a.cu[0], a.cv[0]))
    by_key: dict[str, Box] = {}

    def index(box: Box) -> None:
        by_key[box.key] = box
        for c in box.children or []:
            index(c)

    index(tree)
    for box in by_key.values():
        if box.children is not None:
            box.ranked = rank([c.key for c in box.children], box_edges.get(box.key, []))

    def add_ports(chain: list[str], side: str) -> None:
        for k in range(len(chain) - 1):
            p = by_key[chain[k]].ports[side]
            if chain[k + 1] not in p:
                p.append(chain[k + 1])

    for a in edges:
        ranked = by_key[a.box].ranked
        assert ranked is not None
        a.up = edge_key(a.cu[0], a.cv[0]) in ranked.reversed
        upper, lower = (a.cv, a.cu) if a.up else (a.cu, a.cv)
        add_ports(upper, "bottom")
        add_ports(lower, "top")
    box_agg: dict[str, list[SceneEdge]] = {}
    for a in edges:
        box_agg.setdefault(a.box, []).append(a)
    _layout_tree(pg, tree, by_key, box_agg)
    _place(tree, 0.0, 0.0)
    for a in edges:
        a.points = _route(by_key, a)
    return Scene(tree, by_key, edges, unit_of)


def _build_tree(pg: PreparedGraph, expanded: set[str], g: Group, key: str) -> Box:
    children = []
    for typ, iid, _ in g.items:
        if typ == "node":
            children.append(Box("n:" + iid, node=pg.by_id[iid]))
            continue
        c = pg.groups[iid]
        children.append(
            _build_tree(pg, expanded, c, "g:" + c.id)
            if c.id in expanded
            else Box("g:" + c.id, group=c)
        )
    return Box(key, group=g, children=children)


def _layout_tree(
    pg: PreparedGraph, box: Box, by_key: dict[str, Box], box_agg: dict[str, list[SceneEdge]]
) -> None:
    assert box.children is not None and box.group is not None and box.ranked is not None
    for c in box.children:
        if c.children is not None:
            _layout_tree(pg, c, by_key, box_agg)
        else:
            c.lines, c.w, c.h = leaf_text(pg, c)
    box.inner = layout_box(
        [(c.key, c.w, c.h) for c in box.children],
        box.ranked,
        box.ports,
        _attachments(box, by_key, box_agg.get(box.key, [])),
    )
    root = box.key == "root"
    g = box.group
    box.title = "" if root else f"▾ {trunc(g.label, 40)} · {g.kind} · {fmt_num(g.count)} ops"
    min_w = 0 if root else len(box.title) * CH + 2 * PAD
    box.w = max(box.inner.width + (0 if root else 2 * PAD), min_w)
    box.h = box.inner.height + (0 if root else HEADER + PAD)
    box.dx = (box.w - box.inner.width) / 2
    box.oy = 0 if root else HEADER


def _port_offset(c: Box, side: str, q: str) -> float:
    assert c.inner is not None
    ports = c.inner.port_top if side == "top" else c.inner.port_bottom
    return ports[q] + c.dx - c.w / 2


def _mean(values: list[float]) -> float:
    s = 0.0
    for v in values:
        s += v
    return s / len(values) if values else 0.0


def _attachments(
    box: Box, by_key: dict[str, Box], aggs: list[SceneEdge]
) -> dict[str, tuple[float, float]]:
    """Where this box's edges meet its children that are expanded groups (``attachments``)."""
    acc: dict[str, tuple[list[float], list[float]]] = {}
    for a in aggs:
        upper, lower = (a.cv, a.cu) if a.up else (a.cu, a.cv)
        ua, lb = acc.setdefault(edge_key(upper[0], lower[0]), ([], []))
        ua.append(_port_offset(by_key[upper[0]], "bottom", upper[1]) if len(upper) > 1 else 0.0)
        lb.append(_port_offset(by_key[lower[0]], "top", lower[1]) if len(lower) > 1 else 0.0)
    out = {ek: (_mean(ua), _mean(lb)) for ek, (ua, lb) in acc.items()}
    for k in box.ports["top"]:
        c = by_key[k]
        if c.children is not None:
            out[edge_key(top_port(k), k)] = (
                0.0,
                _mean([_port_offset(c, "top", q) for q in c.ports["top"]]),
            )
    for k in box.ports["bottom"]:
        c = by_key[k]
        if c.children is not None:
            out[edge_key(k, bottom_port(k))] = (
                _mean([_port_offset(c, "bottom", q) for q in c.ports["bottom"]]),
                0.0,
            )
    return out


def _place(box: Box, x: float, y: float) -> None:
    box.x, box.y = x, y
    if box.children is None:
        return
    assert box.inner is not None
    for c in box.children:
        px, py = box.inner.pos[c.key]
        _place(c, x + box.dx + px, y + box.oy + py)


def _route(by_key: dict[str, Box], a: SceneEdge) -> list[tuple[float, float]]:
    upper, lower = (a.cv, a.cu) if a.up else (a.cu, a.cv)
    pts: list[tuple[float, float]] = []

    def push(x: float, y: float) -> None:
        if not pts or abs(pts[-1][0] - x) > 1e-6 or abs(pts[-1][1] - y) > 1e-6:
            pts.append((x, y))

    def inner(box: Box) -> BoxLayout:
        assert box.inner is not None
        return box.inner

    def ax(box: Box, x: float) -> float:
        return box.x + box.dx + x

    def ay(box: Box, y: float) -> float:
        return box.y + box.oy + y

    def dummies(box: Box, ek: str) -> None:
        for dx, lay in inner(box).chains[ek]:
            push(ax(box, dx), ay(box, inner(box).bands[lay][0]))
            push(ax(box, dx), ay(box, inner(box).bands[lay][1]))

    def walk(box: Box, frm: str, ek: str) -> None:
        bottom = ay(box, inner(box).bands[inner(box).layer_of[frm]][1])
        if pts[-1][1] < bottom:
            push(pts[-1][0], bottom)
        dummies(box, ek)

    leaf = by_key[upper[-1]]
    push(leaf.x + leaf.w / 2, leaf.y + leaf.h)
    for k in range(len(upper) - 2, -1, -1):
        box, child = by_key[upper[k]], upper[k + 1]
        walk(box, child, edge_key(child, bottom_port(child)))
        px = ax(box, inner(box).port_bottom[child])
        push(px, ay(box, inner(box).bands[inner(box).bottom_layer][0]))
        push(px, box.y + box.h)
    walk(by_key[a.box], upper[0], edge_key(upper[0], lower[0]))
    for k in range(len(lower)):
        box = by_key[lower[k]]
        if k == len(lower) - 1:
            push(box.x + box.w / 2, box.y)
            break
        child = lower[k + 1]
        px = ax(box, inner(box).port_top[child])
        push(px, box.y)
        push(px, ay(box, 0))
        dummies(box, edge_key(top_port(child), child))
    return pts


def _round(v: float) -> int:
    return math.floor(v + 0.5)  # JavaScript's Math.round


def path_data(points: list[tuple[float, float]]) -> str:
    """SVG path data of a route (``pathData``): whole pixels, relative commands, vertical runs
    straight (a run that moves sideways by under 1.5 px too), layer gaps as vertical-tangent
    curves."""
    px, py = _round(points[0][0]), _round(points[0][1])
    d = [f"M{px},{py}"]
    for x, y in points[1:]:
        x1, y1 = _round(x), _round(y)
        if abs(px - x1) < 1.5:
            if y1 != py:
                d.append(f"v{y1 - py}")
            py = y1
            continue
        dx, dy = x1 - px, y1 - py
        my = _round(dy / 2)
        d.append(f"c0,{my} {dx},{my} {dx},{dy}")
        px, py = x1, y1
    return "".join(d)
