"""A report graph indexed for drawing: the port of ``prepareGraph`` in ``js/model.js``.

Parameters and scalar constants become labels on their consumers; groups come from the report
(or from node paths); a container with more than ``CHUNK_MAX`` children is split, in program
order, into at most ``CHUNK_FANOUT`` chunks of at least ``CHUNK`` children, recursively. Kept in
step with the front end so the static picture and the widget draw the same boxes
(tests/widgets/test_layout_parity.py).

Scopes nest at most ``MAX_DEPTH`` deep: deeper scopes (a loaded file's op names, or the user's
own, can nest thousands deep) fold into one group at that depth whose label says how many were
folded, so no display recurses without bound (the tree is built without recursion).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CHUNK",
    "CHUNK_MAX",
    "MAX_DEPTH",
    "Group",
    "PreparedGraph",
    "ancestors",
    "fmt_num",
    "group_kind",
    "kernel_title",
    "node_line",
    "prepare_graph",
    "top_ops",
    "trunc",
]

CHUNK_MAX = 100
CHUNK = 50
CHUNK_FANOUT = 20
MAX_DEPTH = 64
GATHER = 8  # more outputs than this at the top: each drawn in the group that made it
LOOSE = 4  # more kernels than this outside the user's calls: gathered (``LOOSE``)
_SCALAR = re.compile(r"^[a-z0-9]+\[\]$", re.IGNORECASE)
_BACKWARD = " (backward)"
_CALL_LABEL = re.compile(r"#\d+( \(backward\))?$")
#: what a kernel does, in a word (``kernelTitle``): its most telling op
_OP_WORDS = {
    "dot": "matmul",
    "convolution": "conv",
    "reduce-window": "pool",
    "reduce": "reduce",
    "scatter": "scatter",
    "gather": "gather",
    "exponential": "exp",
    "logistic": "sigmoid",
    "select-and-scatter": "pool grad",
    "sort": "sort",
}
_PLAIN = {
    "parameter",
    "constant",
    "bitcast",
    "broadcast",
    "reshape",
    "copy",
    "convert",
    "tuple",
    "get-tuple-element",
    "iota",
    "slice",
    "concatenate",
    "pad",
    "transpose",
    "dynamic-slice",
    "dynamic-update-slice",
}
_UNITS = ["", "K", "M", "G", "T", "P"]


@dataclass
class Group:
    id: str
    label: str
    kind: str
    parent: str | None
    items: list[tuple[str, str, float]] = field(default_factory=list)  # (type, id, first)
    count: int = 0
    flops: float = 0.0
    bytes: float = 0.0
    first: float = float("inf")
    ops: dict[Any, int] = field(default_factory=dict)
    phases: dict[str, int] = field(
        default_factory=lambda: {"forward": 0, "backward": 0, "mixed": 0}
    )
    line_min: float = float("inf")
    line_max: float = float("-inf")
    call: str | None = None  # "call" (the user's function) | "library" (a library call) | None
    unit: str = "ops"  # what it counts: "ops", or "kernels" in a compiled graph
    cls: str | None = None  # a module's class, where the model library gives it (Block)
    run: tuple[str, int, int, int] | None = None  # a chunk's folded calls (name, lo, hi, n)


@dataclass
class PreparedGraph:
    graph: dict[str, Any]
    nodes: list[dict[str, Any]]
    by_id: dict[str, dict[str, Any]]
    index: dict[str, int]
    labels: set[str]
    in_labels: dict[str, list[str]]
    label_users: dict[str, list[str]]
    edges: list[dict[str, Any]]
    fusion_by_id: dict[str, dict[str, Any]]
    is_compiled: bool
    groups: dict[str, Group] = field(default_factory=dict)
    root: Group | None = None
    parent_of: dict[str, str] = field(default_factory=dict)
    #: node id -> the calls a kernel was fused across (it is drawn on their boundary)
    across: dict[str, list[str]] = field(default_factory=dict)
    report: dict[str, Any] | None = None
    #: zero-cost kernels folded into their neighbours (also in ``labels``: not drawn)
    folded: set[str] = field(default_factory=set)
    #: what the first expansion found per group (scene.py: holds the user's groups)
    memo: dict[str, bool] = field(default_factory=dict)
    #: scene.py's memos: the model's parameter nodes, each group by its path of labels
    param_ids: set[str] | None = None
    by_path: dict[str, Group] | None = None


def fmt_num(x: Any) -> str:
    """``fmtNum`` of js/util.js: 1234567 -> "1.23M" (JavaScript's toFixed rounding)."""
    from decimal import ROUND_HALF_UP, Decimal

    if x is None or x != x:
        return "–"
    v, i = abs(float(x)), 0
    while v >= 1000 and i < len(_UNITS) - 1:
        v /= 1000
        i += 1
    digits = 0 if v >= 100 or i == 0 else 1 if v >= 10 else 2
    if i == 0 and not float(v).is_integer():
        digits = 2
    q = Decimal(v).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP)
    return ("-" if x < 0 else "") + f"{q:.{digits}f}" + _UNITS[i]


def trunc(text: Any, n: int) -> str:
    text = "" if text is None else str(text)
    return text[: max(1, n - 1)] + "…" if len(text) > n else text


def _is_scalar(shape: Any) -> bool:
    return isinstance(shape, str) and bool(_SCALAR.match(shape.strip()))


def _is_label(n: dict[str, Any]) -> bool:
    b = n.get("bytes")
    return n.get("kind") == "param" or (
        n.get("kind") == "const" and (_is_scalar(n.get("shape")) or (1e9 if b is None else b) <= 8)
    )


#: a kernel that moves no data of its own (``zeroCost``): folded into its neighbours
_ZERO_COST = {"bitcast", "copy", "reshape", "tuple", "get-tuple-element"}


def _zero_cost(n: dict[str, Any], fusion_by_id: dict[str, dict[str, Any]]) -> bool:
    if n.get("kind") not in ("op", "fusion"):
        return False
    f = fusion_by_id.get(n["fusion"]) if n.get("fusion") else None
    ops = (f.get("ops") or []) if f is not None else [n.get("opcode") or n.get("op")]
    return bool(ops) and all(o in _ZERO_COST for o in ops)


def prepare_graph(graph: dict[str, Any], report: dict[str, Any]) -> PreparedGraph:
    """Index one report graph for drawing (``prepareGraph``)."""
    nodes = graph.get("nodes") or []
    graphs = report.get("graphs") or {}
    # the train step's kernels (--grad: the value_and_grad program) are its own fusions'
    step = graph is graphs.get("gradient_compiled")
    fusion_by_id = {
        f["id"]: f for f in (report.get("gradient_fusions" if step else "fusions") or [])
    }
    is_compiled = step or graph is graphs.get("compiled")
    by_id, index, labels, folded = {}, {}, set(), set()
    for i, n in enumerate(nodes):
        by_id[n["id"]] = n
        index[n["id"]] = i
        if _is_label(n):
            labels.add(n["id"])
        elif is_compiled and _zero_cost(n, fusion_by_id):
            folded.add(n["id"])
    into: dict[str, list[str]] = {}
    if folded:
        for e in graph.get("edges") or []:
            if e.get("dst") in folded:
                into.setdefault(e["dst"], []).append(e.get("src"))

    def sources_of(nid: str, seen: set[str]) -> list[str]:
        if nid not in folded:
            return [nid]
        if nid in seen:
            return []
        seen.add(nid)
        return [q for p in into.get(nid, []) for q in sources_of(p, seen)]

    in_labels: dict[str, list[str]] = {}
    label_users: dict[str, list[str]] = {}
    edges = []
    for e in graph.get("edges") or []:
        src, dst = e.get("src"), e.get("dst")
        if src not in by_id or dst not in by_id or dst in labels or dst in folded:
            continue
        srcs = list(dict.fromkeys(sources_of(src, set()))) if src in folded else [src]
        for s in srcs:
            if s not in by_id:
                continue
            if s in labels:
                in_labels.setdefault(dst, []).append(s)
                label_users.setdefault(s, []).append(dst)
                continue
            edges.append(e if s == src else {**e, "src": s})
    labels |= folded  # not drawn (and not a label on its consumers)
    pg = PreparedGraph(
        graph=graph,
        nodes=nodes,
        by_id=by_id,
        index=index,
        labels=labels,
        in_labels=in_labels,
        label_users=label_users,
        edges=edges,
        fusion_by_id=fusion_by_id,
        is_compiled=is_compiled,
        report=report,
        folded=folded,
    )
    _build_tree(pg)
    for g in pg.groups.values():
        g.unit = "kernels" if is_compiled else "ops"
    _name_classes(pg)
    return pg


_BACKWARD = " (backward)"


def _name_classes(pg: PreparedGraph) -> None:
    """Each module group's class where the model library gives it (``nameClasses``)."""
    classes = (pg.report or {}).get("module_classes") or {}
    if not classes:
        return
    for g in pg.groups.values():
        if g.kind != "scope":
            continue
        path: list[str] = []
        a: Group | None = g
        while a is not None and a.id != "":
            if a.kind == "scope":
                path.insert(0, a.label.removesuffix(_BACKWARD))
            a = pg.groups.get(a.parent or "")
        cls = classes.get("/".join(path))
        if cls:
            g.cls = cls


def group_kind(g: Group) -> str:
    """What a group is, in a word for its frame (``groupKind``): a module's class, else its
    kind."""
    if not g.cls:
        return g.kind
    return "module" if g.cls == g.label.removesuffix(_BACKWARD) else g.cls


def _build_tree(pg: PreparedGraph) -> None:
    groups: dict[str, Group] = {}
    root = Group("", "all", "root", None)
    groups[""] = root
    drawn = [n for n in pg.nodes if n["id"] not in pg.labels]
    explicit = bool(pg.graph.get("groups")) and any(n.get("group") for n in drawn)
    node_group: dict[str, str] = {}
    if explicit:
        for g in pg.graph["groups"]:
            groups[g["id"]] = Group(
                g["id"], g.get("label"), g.get("kind"), g.get("parent") or "", call=g.get("call")
            )
        _fold_deep(groups)
        for n in drawn:
            node_group[n["id"]] = n["group"] if n.get("group") in groups else ""
        _gather_outputs(pg, drawn, node_group)
    else:
        sites = {}
        for n in drawn:
            calls = _call_paths(pg, n)
            if calls:
                sites[n["id"]] = _call_site(calls)
        if sites and pg.is_compiled:
            _place_bare(pg, drawn, sites)
        shared: dict[str, int] = {}  # kernels on one boundary
        for _prefix, nxt, key in sites.values():
            if len(nxt) > 1:
                shared[key] = shared.get(key, 0) + 1

        def top(n: dict[str, Any]) -> bool:
            site = sites.get(n["id"])
            if site is None:
                return not n.get("path")
            return not site[0] and len(site[1]) < 2

        # with calls known, more than GATHER kernels outside them are one group (two in a
        # train step: forward, backward), not a row of boxes
        outside = [n for n in drawn if sites and n.get("kind") != "output" and top(n)]
        if len(outside) > (LOOSE if pg.is_compiled else GATHER):
            for n in outside:
                back = n.get("phase") == "backward"
                gid = "x:b" if back else "x:"
                if gid not in groups:
                    label = "outside your calls (backward)" if back else "outside your calls"
                    groups[gid] = Group(gid, label, "rest", "")
                node_group[n["id"]] = gid
        for n in drawn:
            if n["id"] in node_group:
                continue
            if n["id"] in sites:
                node_group[n["id"]] = _call_group(pg, groups, n, sites[n["id"]], shared)
                continue
            segs = [s for s in str(n.get("path") or "").split("/") if s]
            if len(segs) > MAX_DEPTH:
                rest = segs[MAX_DEPTH - 1 :]
                segs = [*segs[: MAX_DEPTH - 1], f"{len(rest)} nested scopes: {'/'.join(rest)}"]
            parent = ""
            for i in range(len(segs)):
                gid = "p:" + "/".join(segs[: i + 1])
                if gid not in groups:
                    groups[gid] = Group(gid, segs[i], "scope", parent)
                parent = gid
            node_group[n["id"]] = parent
    for g in groups.values():
        if g.id != "" and g.parent not in groups:
            g.parent = ""
    child_groups: dict[str, list[str]] = {}
    for g in groups.values():
        if g.id != "":
            child_groups.setdefault(g.parent or "", []).append(g.id)
    for n in drawn:
        groups[node_group[n["id"]]].items.append(("node", n["id"], pg.index[n["id"]]))

    # every group after its children (no recursion: scopes can nest deep)
    order, stack = [], [root]
    while stack:
        g = stack.pop()
        order.append(g)
        stack.extend(groups[cid] for cid in child_groups.get(g.id, []))
    for g in reversed(order):
        for cid in child_groups.get(g.id, []):
            c = groups[cid]
            if c.count > 0:
                g.items.append(("group", cid, c.first))
            else:
                del groups[cid]
        for typ, iid, _first in g.items:
            if typ == "node":
                _add_node(g, pg.by_id[iid], pg.index[iid])
            else:
                _merge(g, groups[iid])
        g.items.sort(key=lambda it: it[2])
    # more than CHUNK_MAX children: at most CHUNK_FANOUT chunks of at least CHUNK, recursively
    chunk_id = 0
    work = list(groups.values())
    while work:
        g = work.pop(0)
        if len(g.items) <= CHUNK_MAX:
            continue
        items = g.items
        size = max(CHUNK, -(-len(items) // CHUNK_FANOUT))
        g.items = []
        for i in range(0, len(items), size):
            part = items[i : i + size]
            c = Group(f"chunk:{chunk_id}", "", "chunk", g.id)
            chunk_id += 1
            c.items = part
            for typ, iid, first in part:
                if typ == "node":
                    _add_node(c, pg.by_id[iid], first)
                else:
                    _merge(c, groups[iid])
                    groups[iid].parent = c.id
            c.run = _call_run(groups, part)
            calls = (
                f"{c.run[0]}#{c.run[1]}–#{c.run[2]} ({c.run[3]} calls) · "
                if c.run is not None and c.run[3] > 1
                else ""
            )
            c.label = (
                f"{calls}{', '.join(top_ops(c, 2))} … ({i + 1}–{i + len(part)} of {len(items)})"
            )
            groups[c.id] = c
            g.items.append(("group", c.id, c.first))
            work.append(c)
    for g in groups.values():
        for typ, iid, _first in g.items:
            pg.parent_of[("n:" if typ == "node" else "g:") + iid] = g.id
    pg.groups = groups
    pg.root = root


def _call_paths(pg: PreparedGraph, n: dict[str, Any]) -> list[str]:
    """Where a kernel sits among the user's groups (``callPaths``): its ops' paths through the
    user's calls and modules as they nest, else its own call paths, else its fusion's."""
    if isinstance(n.get("scopes"), list):
        return n["scopes"]
    if isinstance(n.get("calls"), list):
        return n["calls"]
    f = pg.fusion_by_id.get(n["fusion"]) if n.get("fusion") else None
    return f["functions"] if f and isinstance(f.get("functions"), list) else []


def _place_bare(
    pg: PreparedGraph, drawn: list[dict[str, Any]], sites: dict[str, tuple[Any, ...]]
) -> None:
    """A kernel XLA left without the user's names (a broadcast, an iota) sits with its
    neighbour: its first consumer's place, else its first producer's."""
    preds: dict[str, list[str]] = {}
    succs: dict[str, list[str]] = {}
    for e in pg.edges:
        preds.setdefault(e["dst"], []).append(e["src"])
        succs.setdefault(e["src"], []).append(e["dst"])

    def bare(n: dict[str, Any]) -> bool:
        return n["id"] not in sites and n.get("kind") in ("op", "fusion") and not n.get("path")

    for n in reversed(drawn):
        nb = next((i for i in succs.get(n["id"], []) if i in sites), None) if bare(n) else None
        if nb is not None:
            sites[n["id"]] = sites[nb]
    for n in drawn:
        nb = next((i for i in preds.get(n["id"], []) if i in sites), None) if bare(n) else None
        if nb is not None:
            sites[n["id"]] = sites[nb]


def _call_site(calls: list[str]) -> tuple[list[str], list[str], str]:
    """Where a kernel's call paths meet (``callSite``): (their longest common path, the calls
    below it they come from, a key). Forward ops fused into a backward kernel are recomputed
    for it: the kernel is the backward group's."""
    paths = [[s for s in str(c).split("/") if s] for c in calls]
    if any(s.endswith(_BACKWARD) for p in paths for s in p):
        paths = [[s if s.endswith(_BACKWARD) else s + _BACKWARD for s in p] for p in paths]
    k = 0
    while all(k < len(p) and p[k] == paths[0][k] for p in paths):
        k += 1
    nxt = list(dict.fromkeys(p[k] for p in paths if len(p) > k))
    prefix = paths[0][:k]
    if len(prefix) > MAX_DEPTH:  # as scope paths: the deeper calls and scopes in one group
        rest = prefix[MAX_DEPTH - 1 :]
        prefix = [*prefix[: MAX_DEPTH - 1], f"{len(rest)} nested scopes: {'/'.join(rest)}"]
    return prefix, nxt, "/".join(prefix) + "\u0001" + " + ".join(nxt)


def _call_group(
    pg: PreparedGraph,
    groups: dict[str, Group],
    n: dict[str, Any],
    site: tuple[list[str], list[str], str],
    shared: dict[str, int],
) -> str:
    """A kernel's group (``callGroup``): the call holding all its ops; a kernel fused across
    calls sits there, on their boundary, ``pg.across`` naming them; several kernels on one
    boundary are one group of their own (``⇄ a + b``)."""
    prefix, nxt, key = site
    parent = ""
    for i in range(len(prefix)):
        gid = "c:" + "/".join(prefix[: i + 1])
        if gid not in groups:
            # a call of the user's function is numbered (``layer#3``); a module is not
            call = _CALL_LABEL.search(prefix[i]) is not None
            kind = "function" if call else "scope"
            groups[gid] = Group(gid, prefix[i], kind, parent, call="call" if call else None)
        parent = gid
    if len(nxt) > 1:
        pg.across[n["id"]] = nxt
        if shared.get(key, 0) > 1:
            gid = "x:" + key
            if gid not in groups:
                groups[gid] = Group(gid, "⇄ " + " + ".join(nxt), "across", parent)
            parent = gid
    return parent


def node_line(pg: PreparedGraph, n: dict[str, Any]) -> str:
    """The line an op or kernel was written on, short (``nodeLine``): the compiling cell's
    ``L4``, another cell's or file's ``In [2] line 7``; the call site where no own line is
    known."""
    filename = ((pg.report or {}).get("source") or {}).get("filename")
    if n.get("file") and n.get("file_line") is not None and n["file"] == filename:
        return f"L{_num(n['file_line'])}"
    if n.get("loc"):
        return str(n["loc"])
    return f"L{_num(n['line'])}" if n.get("line") is not None else ""


def _num(v: Any) -> str:
    """A number as JavaScript's template strings write it (7, not 7.0)."""
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def kernel_title(pg: PreparedGraph, n: dict[str, Any]) -> str:
    """A kernel's box title in the user's words (``kernelTitle``): the call or module it sits
    in and what it does (``layer#3 · matmul``, ``blocks_0 · gelu``, ``loss · log_softmax``)."""
    f = pg.fusion_by_id.get(n["fusion"]) if n.get("fusion") else None
    ops = (f or {}).get("ops") or [n.get("opcode") or n.get("op")]
    lib = n.get("lib")
    if isinstance(lib, list) and lib:
        what = "+".join(lib[:2])
    else:
        telling = next((o for o in ops if o in _OP_WORDS and o != "reduce"), None) or next(
            (o for o in ops if o == "reduce"), None
        )
        rest = list(dict.fromkeys(o for o in ops if o not in _PLAIN))
        what = _OP_WORDS[telling] if telling else "+".join(rest[:2]) if rest else ops[0] or n["op"]
    g = pg.groups.get(pg.parent_of.get("n:" + n["id"], ""))
    while g is not None and g.id != "" and g.kind in ("chunk", "across", "rest"):
        g = pg.groups.get(g.parent or "")
    across = pg.across.get(n["id"])
    if across:
        where = " + ".join(across)
    elif g is not None and g.id != "":
        where = g.label
    else:
        where = str((pg.report or {}).get("name") or "")
    return f"{where} · {what}" if where else str(what)


def _gather_outputs(pg: PreparedGraph, drawn: list[dict[str, Any]], node_group: dict[str, str]):
    """In a gradient program, or one with more than ``GATHER`` outputs, an output made inside
    one group is drawn in it (``gatherOutputs``): no row of N output boxes."""
    loose = sum(1 for n in drawn if n.get("kind") == "output" and not node_group.get(n["id"]))
    if loose <= GATHER and not any(n.get("phase") == "backward" for n in drawn):
        return
    preds: dict[str, list[str]] = {}
    for e in pg.edges:
        preds.setdefault(e["dst"], []).append(e["src"])
    for n in drawn:
        if n.get("kind") != "output" or node_group.get(n["id"]):
            continue
        found = list(dict.fromkeys(node_group.get(p) for p in preds.get(n["id"], [])))
        if len(found) == 1 and found[0]:
            node_group[n["id"]] = found[0]


def _fold_deep(groups: dict[str, Group]) -> None:
    """Report groups deeper than ``MAX_DEPTH`` move up to their ancestor at that depth (their
    label says so); a parent cycle is cut at the root."""
    depth: dict[str, int] = {"": 0}
    for gid in list(groups):
        chain: list[str] = []
        cur = gid
        while cur not in depth:
            if cur in chain:  # a cycle: cut it here, and walk this group's chain again
                groups[cur].parent = ""
                chain, cur = [], gid
                continue
            chain.append(cur)
            parent = groups[cur].parent or ""
            if parent not in groups:
                groups[cur].parent = parent = ""
            cur = parent
        for member in reversed(chain):
            depth[member] = depth[groups[member].parent or ""] + 1
    anchor: dict[str, str] = {}
    for gid in sorted(depth, key=depth.__getitem__):
        if gid == "" or depth[gid] <= MAX_DEPTH:
            anchor[gid] = gid
            continue
        g = groups[gid]
        parent = g.parent or ""
        anchor[gid] = anchor[parent]
        g.parent = anchor[parent]
        if depth[gid] > MAX_DEPTH + 1:
            g.label = f"{g.label} (scope {depth[gid]} deep, drawn at depth {MAX_DEPTH + 1})"


def _add_node(g: Group, n: dict[str, Any], i: int) -> None:
    g.count += 1
    g.flops += n.get("flops") or 0
    g.bytes += n.get("bytes") or 0
    g.first = min(g.first, i)
    g.ops[n.get("op")] = g.ops.get(n.get("op"), 0) + 1
    if n.get("phase") in g.phases:
        g.phases[n["phase"]] += 1
    if n.get("line") is not None:
        g.line_min = min(g.line_min, n["line"])
        g.line_max = max(g.line_max, n["line"])


def _merge(g: Group, c: Group) -> None:
    g.count += c.count
    g.flops += c.flops
    g.bytes += c.bytes
    g.first = min(g.first, c.first)
    for op, k in c.ops.items():
        g.ops[op] = g.ops.get(op, 0) + k
    for p in c.phases:
        g.phases[p] += c.phases[p]
    g.line_min = min(g.line_min, c.line_min)
    g.line_max = max(g.line_max, c.line_max)


_CALL_NUMBER = re.compile(r"^(.*)#(\d+)$")


def _call_run(
    groups: dict[str, Group], items: list[tuple[str, str, float]]
) -> tuple[str, int, int, int] | None:
    """A chunk's repeated calls, folded (``callRun``): where every group it holds is a call of
    one function (``cheap#1`` … ``cheap#150``, or chunks of them), (name, lo, hi, n)."""
    run: tuple[str, int, int, int] | None = None
    for typ, iid, _first in items:
        if typ != "group":
            continue
        g = groups[iid]
        r = None
        if g.kind == "chunk":
            r = g.run
        elif g.call == "call":
            m = _CALL_NUMBER.match(g.label or "")
            if m:
                r = (m.group(1), int(m.group(2)), int(m.group(2)), 1)
        if r is None or (run is not None and run[0] != r[0]):
            return None
        run = r if run is None else (run[0], min(run[1], r[1]), max(run[2], r[2]), run[3] + r[3])
    return run


def top_ops(g: Group, k: int) -> list[str]:
    """The k most frequent ops of a group (ties: first seen first)."""
    return [str(op) for op, _ in sorted(g.ops.items(), key=lambda kv: -kv[1])[:k]]


def group_phase(g: Group) -> str | None:
    """Majority phase of a group (``groupPhase``)."""
    f, b, m = g.phases["forward"], g.phases["backward"], g.phases["mixed"]
    if f + b + m == 0:
        return None
    if m > 0 or (f > 0 and b > 0):
        return "forward" if f >= 2 * b else "backward" if b >= 2 * f else "mixed"
    return "forward" if f > 0 else "backward"


def ancestors(pg: PreparedGraph, key: str) -> list[str]:
    """Group ids from the root down to (excluding) the unit with this key."""
    out = []
    gid = pg.parent_of.get(key)
    while gid is not None and gid != "":
        out.append(gid)
        gid = pg.parent_of.get("g:" + gid)
    out.reverse()
    return out
