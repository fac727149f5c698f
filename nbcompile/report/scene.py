"""What one graph view draws, as data: the port of ``js/scene.js`` for the static picture.

Visible boxes (nodes, collapsed groups, expanded groups as frames) laid out as nested layered
boxes (:mod:`.layout`), and every edge as a polyline running only between boxes: through the
bottom ports of its upper end's groups, across their lowest common box, and in through the top
ports of its lower end's groups. Same expansion rule, same box texts and sizes, same layout as
the widget (tests/widgets/test_layout_parity.py).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from .graphmodel import (
    Group,
    PreparedGraph,
    ancestors,
    fmt_num,
    group_kind,
    group_phase,
    kernel_title,
    node_line,
    trunc,
)
from .layout import (
    GAP,
    BoxLayout,
    Ranked,
    bottom_port,
    edge_key,
    follow_rank,
    layout_box,
    mirror_rank,
    rank,
    top_port,
)
from .loops import loop_leaf_lines

__all__ = [
    "CH",
    "FIRST_LIMIT",
    "HEADER",
    "INITIAL_LIMIT",
    "LINE",
    "MAXW",
    "PAD",
    "Box",
    "Scene",
    "SceneEdge",
    "build_scene",
    "initial_expansion",
    "is_user_group",
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
    #: two facing columns (a call and its backward group): (columns, partner), see _mirror_of
    mirror: tuple[dict[str, int], dict[str, str]] | None = None
    #: an open backward group beside its open forward group: (that group, child partners)
    follow: tuple[Box, dict[str, str]] | None = None
    #: the open backward group that follows this one (it is ``follow[0]`` there)
    leads: Box | None = None


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
    flat: bool = False  # between two children of one layer, drawn sideways
    columns: bool = False  # between children of a box drawn as two facing columns
    residual: float | None = None  # a forward call to its backward group: the residual bytes
    cross: bool = False  # from inside a forward group to inside its backward group, side to side
    depth: int = -1  # the depth in cu / cv of the innermost facing pair holding the two ends


@dataclass
class Scene:
    root: Box
    boxes: dict[str, Box]
    edges: list[SceneEdge]
    unit_of: dict[str, str]


#: the first picture (the whiteboard picture): the user's calls and modules, at most this many
#: boxes (one group alone: up to the budget); the Gradient tab's facing columns: INITIAL_LIMIT
FIRST_LIMIT = 25
INITIAL_LIMIT = 60
#: a cond's branches are not the user's calls or modules: a loop holding only them stays one
#: box (with its bar strip) at first paint, rather than a row of branches past the canvas edge
_NOT_USER = ("custom", "chunk", "across", "rest", "branch")


def is_user_group(pg: PreparedGraph, g: Group) -> bool:
    """A group the user wrote (``isUserGroup``): a call of their function, a module or named
    scope, a loop, a nested jit around such groups; not a library call, a nested jit of ops
    alone (jax.numpy's own), a custom-derivative wrapper or a chunk."""
    if g.kind == "function":
        return g.call == "call" or (g.call is None and _holds_user_groups(pg, g))
    return g.call != "library" and g.kind not in _NOT_USER


def _holds_user_groups(pg: PreparedGraph, g: Group) -> bool:
    """Opening ``g`` shows more of the user's own structure (``holdsUserGroups``)."""
    # bottom-up without recursion: a chain of single groups is as deep as the user's scopes
    # (up to graphmodel.MAX_DEPTH), deeper than Python's stack
    stack = [(g, False)]
    while stack:
        h, ready = stack.pop()
        if h.id in pg.memo:
            continue
        subs = [pg.groups[iid] for typ, iid, _ in h.items if typ == "group"]
        if not ready:
            stack.append((h, True))
            stack.extend((c, False) for c in subs if c.id not in pg.memo)
            continue
        pg.memo[h.id] = any(is_user_group(pg, c) for c in subs) and (
            len(h.items) > 1 or pg.memo[subs[0].id]
        )
    return pg.memo[g.id]


def _is_twin(label: str, labels: set[str]) -> bool:
    """Whether a group is the backward twin of a forward group beside it (``isTwin``)."""
    if label.endswith(" (backward)"):
        return label.removesuffix(" (backward)") in labels
    head = "transpose(jvp("
    return label.startswith(head) and label.endswith("))") and label[len(head) : -2] in labels


def initial_expansion(
    pg: PreparedGraph,
    limit: int,
    budget: int,
    chunk_limit: int = CHUNK_LIMIT,
    user_only: bool = True,
    pairs: bool = False,
) -> set[str]:
    """Group ids expanded first: whole depth levels while they fit ``limit`` boxes; where a
    level does not fit, its groups other than chunks when they do, else those other than the
    backward twins of forward calls (``initialExpansion``). A
    library call the user made (``gelu``, ``var``) stays one collapsed box; with ``user_only``
    a group opens only where it holds the user's own calls or modules."""
    expanded: set[str] = set()
    assert pg.root is not None
    level = [pg.root]
    count = len(pg.root.items)

    def fits(groups: list[Group]) -> bool:
        extra = sum(len(g.items) - 1 for g in groups)
        cap = min(limit, chunk_limit) if all(g.kind == "chunk" for g in groups) else limit
        # one group alone, or one call with its backward group (facing), up to the budget
        first = groups[0].label if groups else ""
        twins = (f"{first} (backward)", f"transpose(jvp({first}))")
        one = len(groups) == 1 or (pairs and len(groups) == 2 and groups[1].label in twins)
        return bool(groups) and (count + extra <= cap or (one and count + extra <= budget))

    while level:
        groups = [pg.groups[iid] for g in level for typ, iid, _ in g.items if typ == "group"]
        groups = [
            g
            for g in groups
            if g.call != "library"
            and (not user_only or g.kind == "chunk" or _holds_user_groups(pg, g))
        ]
        if not fits(groups):
            own = [g for g in groups if g.kind != "chunk"]
            if len(own) < len(groups) and fits(own):
                groups = own
            else:
                # a train step: the forward calls open, their backward twins stay one box each
                # (``loss_fn`` opens to its layers beside ``transpose(jvp(loss_fn))``)
                labels = {g.label for g in own}
                fwd = [g for g in own if not _is_twin(g.label, labels)]
                if len(fwd) == len(own) or not fits(fwd):
                    break
                groups = fwd
        extra = sum(len(g.items) - 1 for g in groups)
        expanded.update(g.id for g in groups)
        count += extra
        level = groups
    if user_only and not expanded and count < 5:
        # a program with no structure of the user's below its top (one call): its contents
        return initial_expansion(pg, limit, budget, chunk_limit, False, pairs)
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


_DIMS = re.compile(r"\[([^\]]*)\]")
_COMPUTES = ("op", "call", "fusion")  # nodes whose result is a group's output
_ARG_ROOT = re.compile(r"[.\[]")


def group_summary(pg: PreparedGraph, g: Group) -> str:
    """A collapsed group's last line (``groupSummary``), what a whiteboard says of a layer: the
    shape of its output (its last op's or kernel's) and the parameters it reads (``(16, 32) ·
    1.06K params``: elements of the model's parameter arrays, ``report.param_args``, a backward
    group counting its forward twin's too). A part not known is left out; a compiled group
    with neither says its flops (XLA); "" where nothing is known."""
    read = _param_ids(pg)
    params: dict[str, None] = {}
    last: tuple[float, Any] | None = None

    def walk(top: Group, own: bool) -> None:
        nonlocal last
        stack = [top]
        while stack:
            grp = stack.pop()
            for typ, iid, first in grp.items:
                if typ == "group":
                    stack.append(pg.groups[iid])
                    continue
                n = pg.by_id[iid]
                shaped = own and n.get("kind") in _COMPUTES and n.get("shape")
                if shaped and (last is None or first > last[0]):
                    last = (first, n.get("shape"))
                for lid in pg.in_labels.get(iid, []):
                    if lid in read:
                        params[lid] = None

    walk(g, True)
    twin = _forward_twin(pg, g) if read and g.label.endswith(BACKWARD) else None
    if twin is not None:
        walk(twin, False)
    count = sum(_elements(pg.by_id[lid].get("shape")) for lid in params)
    parts = []
    shape = shape_text(last[1]) if last is not None else ""
    if shape:
        parts.append(shape)
    if count:
        parts.append(f"{fmt_num(count)} params")
    if not parts and pg.is_compiled and g.flops:
        parts.append(f"{fmt_num(g.flops)} flops (XLA)")
    return " · ".join(parts)


def _param_ids(pg: PreparedGraph) -> set[str]:
    """``groupParams``: the label nodes that are the model's parameters (program inputs of the
    arguments named in ``report.param_args``, known by their label's root)."""
    if pg.param_ids is None:
        args = set((pg.report or {}).get("param_args") or [])
        pg.param_ids = {
            lid
            for lid in pg.labels
            if args
            and pg.by_id[lid].get("kind") == "param"
            and _ARG_ROOT.split(str(pg.by_id[lid].get("label") or ""), maxsplit=1)[0] in args
        }
    return pg.param_ids


def _forward_twin(pg: PreparedGraph, g: Group) -> Group | None:
    """``forwardTwin``: the group with ``g``'s path of labels without " (backward)"."""
    if pg.by_path is None:
        pg.by_path = {_group_path(pg, h): h for h in pg.groups.values() if h.id != ""}
    path = "/".join(p.removesuffix(BACKWARD) for p in _group_path(pg, g).split("/"))
    twin = pg.by_path.get(path)
    return twin if twin is not None and twin is not g else None


def shape_text(shape: Any) -> str:
    """``shapeText``: ``f32[16,32]{1,0}`` -> ``(16, 32)``, a scalar ``scalar``; a tuple of
    arrays, its first."""
    m = _DIMS.search(str(shape or ""))
    if not m:
        return ""
    dims = [d.strip() for d in m.group(1).split(",") if d.strip()]
    if not dims:
        return "scalar"
    return f"({', '.join(dims)}{',' if len(dims) == 1 else ''})"


def _elements(shape: Any) -> int:
    m = _DIMS.search(str(shape or ""))
    if not m:
        return 0
    out = 1
    for d in m.group(1).split(","):
        if d.strip():
            digits = re.match(r"\s*(-?\d+)", d)
            out *= int(digits.group(1)) if digits else 0
    return out


def leaf_text(pg: PreparedGraph, c: Box) -> tuple[list[str], float, float]:
    """Lines of text and size of a leaf box (``leafText``)."""
    if c.node is not None:
        n = c.node
        fusion = pg.fusion_by_id.get(n["fusion"]) if pg.is_compiled and n.get("fusion") else None
        ins = [pg.by_id[i].get("label") or i for i in pg.in_labels.get(n["id"], [])]
        own = node_line(pg, n)
        where = f" · {own}" if own else ""
        shape = n.get("shape") or ""
        op = n.get("op")
        if fusion or n.get("kind") == "fusion" or (pg.is_compiled and n.get("kind") == "op"):
            # a kernel: where it came from in the user's words, then XLA's name
            lib = (fusion.get("library") or fusion.get("kind")) if fusion else None
            name = f"{n.get('label') or op}{' · ' + str(lib) if fusion else ''}"
            lines = [kernel_title(pg, n), name, shape + where]
        else:
            label = n.get("label")
            lines = [f"{op} {label}" if label and label != op else str(op), shape + where]
        across = pg.across.get(n["id"])
        if across:
            lines.append("⇄ across " + " + ".join(across))
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
        kind = "" if g.kind in ("chunk", "rest") else f"{group_kind(g)} · "
        unit = "kernels" if pg.is_compiled else "ops"
        summary = group_summary(pg, g)
        lines = [f"▸ {g.label}", f"{kind}{fmt_num(g.count)} {unit}{lr}"] + (
            [summary] if summary else []
        )
        lines += loop_leaf_lines(pg, g)
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
    # outputs the backward pass made (the gradients)
    phase_of = {n["id"]: n.get("phase") for n in pg.nodes}
    made_by: dict[str, list[str]] = {}
    for e in pg.edges:
        made_by.setdefault(e["dst"], []).append(e["src"])
    back_out = {
        n["id"]
        for n in pg.nodes
        if n.get("kind") == "output"
        and any(phase_of.get(p) == "backward" for p in made_by.get(n["id"], []))
    }
    by_key: dict[str, Box] = {}

    def index(box: Box) -> None:
        by_key[box.key] = box
        for c in box.children or []:
            index(c)

    index(tree)
    for box in by_key.values():
        if box.children is not None:
            keys = [c.key for c in box.children]
            box.mirror = _mirror_of(box, False, back_out)
            box.ranked = (
                mirror_rank(keys, box_edges.get(box.key, []), *box.mirror)
                if box.mirror
                else rank(keys, box_edges.get(box.key, []))
            )
    # an open forward group and its open backward group side by side: the backward group's
    # rows follow the forward group's (both one straight column), and so on down, for each pair
    # of children that are both open
    across: dict[str, dict[str, list[str]]] = {}
    for a in edges:
        for k in range(min(len(a.cu), len(a.cv)) - 1):
            m = across.setdefault(edge_key(a.cu[k], a.cv[k]), {})
            m.setdefault(a.cv[k + 1], []).append(a.cu[k + 1])

    def pair_up(f: Box, b: Box) -> None:
        if f.children is None or b.children is None or f.mirror or b.mirror:
            return
        found = _mirror_of(Box("", children=[*f.children, *b.children]), True, back_out)
        if not found or not found[1]:
            return
        assert f.ranked is not None
        f.ranked.columns = {c.key: 0 for c in f.children}
        b.ranked = follow_rank(
            [c.key for c in b.children],
            box_edges.get(b.key, []),
            found[1],
            f.ranked.layer,
            across.get(edge_key(f.key, b.key)),
        )
        b.follow = (f, found[1])
        f.leads = b
        for bk, fk in found[1].items():
            pair_up(by_key[fk], by_key[bk])

    for box in list(by_key.values()):
        for bk, fk in (box.mirror[1] if box.mirror else {}).items():
            pair_up(by_key[fk], by_key[bk])

    def add_ports(chain: list[str], side: str) -> None:
        for k in range(len(chain) - 1):
            p = by_key[chain[k]].ports[side]
            if chain[k + 1] not in p:
                p.append(chain[k + 1])

    pair_bytes = {p[0]: p[2] for p in (report_gradient(pg).get("pairs") or [])}
    for a in edges:
        common = by_key[a.box]
        ranked = common.ranked
        assert ranked is not None
        a.up = edge_key(a.cu[0], a.cv[0]) in ranked.reversed
        a.columns = common.mirror is not None or common.follow is not None
        a.flat = any(
            (p == a.cu[0] and q == a.cv[0]) or (p == a.cv[0] and q == a.cu[0])
            for p, q in ranked.flat
        )
        # from inside a forward group to inside its backward group beside it: side to side,
        # between the children of the innermost facing pair that hold the two ends
        a.depth = -1
        for k in range(min(len(a.cu), len(a.cv)) - 1):
            follow = by_key[a.cv[k]].follow
            if not follow or follow[0].key != a.cu[k]:
                break
            a.depth = k
        a.cross = a.depth >= 0
        if a.cross:
            a.flat = True
        pair_follow = by_key[a.cv[a.depth]].follow if a.cross else None
        fk, bk, pairs = (
            (a.cu[a.depth + 1], a.cv[a.depth + 1], pair_follow[1])
            if pair_follow
            else (a.cu[0], a.cv[0], common.mirror[1] if common.mirror else None)
        )
        if pairs is not None and pairs.get(bk) == fk:
            f = by_key[fk].group
            label = f.label if f else None
            a.residual = (
                pair_bytes[label]
                if label in pair_bytes
                else pair_bytes.get(_group_path(pg, f), a.bytes)
            )
        if a.flat:
            continue  # no ports: drawn straight across
        upper, lower = (a.cv, a.cu) if a.up else (a.cu, a.cv)
        add_ports(upper, "bottom")
        add_ports(lower, "top")
    box_agg: dict[str, list[SceneEdge]] = {}
    for a in edges:
        if not a.flat:
            box_agg.setdefault(a.box, []).append(a)
    _layout_tree(pg, tree, by_key, box_agg)
    _place(tree, 0.0, 0.0)
    for a in edges:
        # a sideways line may run through its ends and the groups holding them, no other box
        holders = (
            {"root", a.u, a.v, *("g:" + g for g in ancestors(pg, a.u) + ancestors(pg, a.v))}
            if a.flat
            else set()
        )
        a.points = _route(by_key, a, holders)
    return Scene(tree, by_key, edges, unit_of)


BACKWARD = " (backward)"


def report_gradient(pg: PreparedGraph) -> dict[str, Any]:
    """The report's ``gradient`` section (pairs: forward group, backward group, bytes)."""
    return pg.report.get("gradient") or {} if pg.report else {}


def _mirror_of(
    box: Box, loose: bool = False, back_out: set[str] | None = None
) -> tuple[dict[str, int], dict[str, str]] | None:
    """Two facing columns for a box holding calls and their backward groups (``mirrorOf``);
    None also when the backward side is mostly loose ops, not groups (unless ``loose``: the
    children of a facing pair)."""
    by_label: dict[str, str] = {}
    for c in box.children or []:
        if c.group is not None:
            by_label[c.group.label] = c.key
    partner: dict[str, str] = {}
    for c in box.children or []:
        label = c.group.label if c.group is not None else ""
        if label.endswith(BACKWARD) and label[: -len(BACKWARD)] in by_label:
            partner[c.key] = by_label[label[: -len(BACKWARD)]]
    if not partner:
        return None
    columns: dict[str, int] = {}
    for c in box.children or []:
        if c.key in partner:
            back = True
        elif c.group is not None:
            back = c.group.label.endswith(BACKWARD) or group_phase(c.group) == "backward"
        else:  # (a gradient, an output the backward pass made, is the backward column's)
            node = c.node or {}
            back = node.get("phase") == "backward" or node.get("id") in (back_out or ())
        columns[c.key] = 1 if back else 0
    unpaired = sum(1 for c in box.children or [] if columns[c.key] and c.key not in partner)
    return None if unpaired > 3 * len(partner) and not loose else (columns, partner)


def _group_path(pg: PreparedGraph, g: Group | None) -> str:
    """A group's labels from the root down: ``loss#1/block#3``."""
    out: list[str] = []
    while g is not None and g.id != "":
        out.insert(0, g.label)
        g = pg.groups.get(g.parent or "")
    return "/".join(out)


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
    _layout_children(pg, box, by_key, box_agg)
    for c in box.children:
        if c.follow is not None:
            _align_pair(pg, c.follow[0], c, by_key, box_agg)
    _layout_frame(box, by_key, box_agg)


def _layout_children(
    pg: PreparedGraph, box: Box, by_key: dict[str, Box], box_agg: dict[str, list[SceneEdge]]
) -> None:
    """Size an open group's children; a facing pair's two members wait for _align_pair."""
    for c in box.children or []:
        if c.follow is not None or c.leads is not None:
            continue
        if c.children is not None:
            _layout_tree(pg, c, by_key, box_agg)
        else:
            c.lines, c.w, c.h = leaf_text(pg, c)


def _align_pair(
    pg: PreparedGraph, f: Box, b: Box, by_key: dict[str, Box], box_agg: dict[str, list[SceneEdge]]
) -> None:
    """A facing pair, inside out (``alignPair``): its children and their own pairs, its rows."""
    _layout_children(pg, f, by_key, box_agg)
    _layout_children(pg, b, by_key, box_agg)
    for c in b.children or []:
        if c.follow is not None:
            _align_pair(pg, c.follow[0], c, by_key, box_agg)
    _align_rows(f, b, by_key, box_agg)


def _align_rows(
    f: Box, b: Box, by_key: dict[str, Box], box_agg: dict[str, list[SceneEdge]]
) -> None:
    """A forward group and its backward group side by side (``alignRows``): the same top port
    layer, each layer's band as tall as the taller of the two, so their rows line up."""
    assert f.ranked is not None and b.ranked is not None
    f.ranked.force_top = b.ranked.force_top = bool(f.ports["top"] or b.ports["top"])
    _layout_frame(f, by_key, box_agg)
    _layout_frame(b, by_key, box_agg)
    assert f.inner is not None and b.inner is not None
    hf = [bot - top for top, bot in f.inner.bands]
    hb = [bot - top for top, bot in b.inner.bands]
    joint = [
        max(hf[i] if i < len(hf) else 0.0, hb[i] if i < len(hb) else 0.0)
        for i in range(max(len(hf), len(hb)))
    ]
    f.ranked.min_bands = b.ranked.min_bands = joint
    _layout_frame(f, by_key, box_agg)
    _layout_frame(b, by_key, box_agg)


def _layout_frame(box: Box, by_key: dict[str, Box], box_agg: dict[str, list[SceneEdge]]) -> None:
    """Lay out one open group's children (already sized) and size the group (``layoutFrame``)."""
    assert box.children is not None and box.group is not None and box.ranked is not None
    box.inner = layout_box(
        [(c.key, c.w, c.h) for c in box.children],
        box.ranked,
        box.ports,
        _attachments(box, by_key, box_agg.get(box.key, [])),
    )
    root = box.key == "root"
    g = box.group
    unit = g.unit or "ops"
    box.title = (
        "" if root else f"▾ {trunc(g.label, 40)} · {group_kind(g)} · {fmt_num(g.count)} {unit}"
    )
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


def _route(by_key: dict[str, Box], a: SceneEdge, holders: set[str]) -> list[tuple[float, float]]:
    upper, lower = (a.cv, a.cu) if a.up else (a.cu, a.cv)
    if a.flat:
        # sideways between two boxes of one row (a residual), from the facing sides: the two
        # children of the innermost facing pair that hold the ends, or of an outer pair (at last
        # of the common box) where the line would pass within CLEARANCE of another box
        def sideways(k: int) -> list[tuple[float, float]]:
            p = by_key[a.cu[0] if k < 0 else a.cu[k + 1]]
            q = by_key[a.cv[0] if k < 0 else a.cv[k + 1]]
            ltr = p.x <= q.x
            return [
                (p.x + p.w if ltr else p.x, p.y + p.h / 2),
                (q.x if ltr else q.x + q.w, q.y + q.h / 2),
            ]

        def clear(pts: list[tuple[float, float]]) -> bool:
            line = _curve(pts[0], pts[1])
            for b in by_key.values():
                if b.key in holders:
                    continue
                for i in range(1, len(line)):
                    if _segment_hits(line[i - 1], line[i], b, CLEARANCE):
                        return False
            return True

        start = a.depth if a.cross else -1
        for k in range(start, -2, -1):
            pts = sideways(k)
            if clear(pts):
                return pts
        # else around: out of the side, along the gap below the row (clear of the common box's
        # children), in at the other side
        common = by_key[a.box]
        assert common.inner is not None
        band = common.inner.bands[common.inner.layer_of[a.cu[0]]]
        gy = common.y + common.oy + band[1] + GAP["layer"] / 2
        (x0, y0), (x1, y1) = sideways(-1)
        out = GAP["node"] / 3 if x0 <= x1 else -GAP["node"] / 3
        return [(x0, y0), (x0 + out, gy), (x1 - out, gy), (x1, y1)]
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


def _curve(p: tuple[float, float], q: tuple[float, float]) -> list[tuple[float, float]]:
    """The curve path_data draws from p to q (vertical tangents at both ends), in 8 pieces."""
    my = (q[1] - p[1]) / 2
    out = [p]
    for i in range(1, 9):
        t = i / 8
        u = 1 - t
        a = 3 * u * t * t + t * t * t
        out.append(
            (
                p[0] + (q[0] - p[0]) * a,
                p[1] + 3 * u * u * t * my + 3 * u * t * t * my + t * t * t * (q[1] - p[1]),
            )
        )
    return out


#: How near (px) a sideways line may pass a box it does not join: half the gap the layout keeps
#: beside a line that runs down (GAP["dummy"]), so it never seems to touch one, and more than
#: path_data's whole-pixel rounding moves it (about 1 px). A line that only stayed outside the exact box grazed a corner
#: by 0.05 px and was drawn 1 px into it (a train step's ``blocks_3 (backward)``).
CLEARANCE = GAP["dummy"] / 2


def _segment_hits(p: tuple[float, float], q: tuple[float, float], b: Box, margin: float) -> bool:
    """Does the segment pq come nearer than ``margin`` px to box b (run strictly inside b grown
    by ``margin``)? Liang-Barsky clipping."""
    x0, y0, x1, y1 = b.x - margin, b.y - margin, b.x + b.w + margin, b.y + b.h + margin
    t0, t1 = 0.0, 1.0
    dx, dy = q[0] - p[0], q[1] - p[1]
    for pp, qq in ((-dx, p[0] - x0), (dx, x1 - p[0]), (-dy, p[1] - y0), (dy, y1 - p[1])):
        if pp == 0:
            if qq <= 0:
                return False
            continue
        t = qq / pp
        if pp < 0:
            t0 = max(t0, t)
        else:
            t1 = min(t1, t)
        if t0 > t1:
            return False
    return t1 - t0 > 1e-6


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
