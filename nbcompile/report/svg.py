"""A static SVG picture of a report graph, laid out in pure Python with bounded work.

Used for the static fallback (an ``<img>`` data URI that survives untrusted notebooks and
offline exports). Like the interactive view, it draws parameters and scalar constants as labels,
collapses groups (whole depth levels at a time) until at most ``max_nodes`` boxes remain, and
lays them out with a small layered algorithm (longest-path layers, a fixed number of barycentre
sweeps): Graphviz is far too slow on real HLO graphs (FACTS.md). Work is O(nodes · depth +
edges) plus O(max_nodes²) for the layout, whatever the graph size.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from html import escape
from typing import Any

__all__ = ["graph_svg"]

_CH = 6.7  # px per character, 11px monospace
_LINE = 14
_HGAP = 16
_VGAP = 28
_MAXW = 230
_FILL = {
    "op": ("#e3effa", "#1e6fbf"),
    "fusion": ("#fdebd9", "#d9660b"),
    "group": ("#eeeeee", "#777777"),
    "output": ("#e2f2e3", "#3b8b3f"),
    "const": ("#f2f2f2", "#888888"),
    "call": ("#e3effa", "#1e6fbf"),
}
_PHASE = {
    "forward": ("#d3e8fb", "#1e88e5"),
    "backward": ("#ffe0d6", "#f4511e"),
    "mixed": ("#efd7f4", "#8e24aa"),
}


def _is_label(node: dict[str, Any]) -> bool:
    shape = str(node.get("shape") or "")
    scalar = shape.endswith("[]") and "," not in shape
    return node.get("kind") == "param" or (
        node.get("kind") == "const" and (scalar or (node.get("bytes") or 1e9) <= 8)
    )


def _chains(
    graph: dict[str, Any], drawn: list[dict[str, Any]]
) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Group chain (outermost first) of each drawn node, and each group's label."""
    groups = {g["id"]: g for g in graph.get("groups") or []}
    labels = {gid: str(g.get("label") or gid) for gid, g in groups.items()}
    chains: dict[str, list[str]] = {}
    if groups and any(n.get("group") for n in drawn):
        cache: dict[str, list[str]] = {}

        def chain(gid: str | None) -> list[str]:
            if gid is None or gid not in groups:
                return []
            if gid not in cache:
                cache[gid] = []  # cycle guard
                cache[gid] = [*chain(groups[gid].get("parent")), gid]
            return cache[gid]

        for n in drawn:
            chains[n["id"]] = chain(n.get("group"))
    else:
        for n in drawn:
            segs = [s for s in str(n.get("path") or "").split("/") if s]
            ids = ["p:" + "/".join(segs[: i + 1]) for i in range(len(segs))]
            labels.update(zip(ids, segs, strict=True))
            chains[n["id"]] = ids
    return chains, labels


def _choose_expanded(chains: dict[str, list[str]], max_nodes: int) -> set[str]:
    """Expand groups level by level, cheapest first, while the boxes stay within ``max_nodes``.

    A level is only gone past when every group on it was expanded, so the picture stays
    symmetric (all layers shown the same way).
    """
    expanded: set[str] = set()
    count = len({c[0] if c else "n:" + nid for nid, c in chains.items()})
    depth = 0
    while True:
        children: dict[str, set[str]] = defaultdict(set)
        for nid, c in chains.items():
            if len(c) > depth and all(g in expanded for g in c[:depth]):
                children[c[depth]].add(c[depth + 1] if len(c) > depth + 1 else "n:" + nid)
        if not children:
            return expanded
        complete = True
        for gid, kids in sorted(children.items(), key=lambda kv: len(kv[1])):
            if count + len(kids) - 1 > max_nodes:
                complete = False
                break
            expanded.add(gid)
            count += len(kids) - 1
        if not complete:
            return expanded
        depth += 1


def graph_svg(graph_json: dict[str, Any], *, max_nodes: int = 60, title: str | None = None) -> str:
    """An SVG picture of one report graph (``report["graphs"]["traced"]`` or ``["compiled"]``).

    At most ``max_nodes`` boxes are drawn: groups are collapsed and, where one level still holds
    too many boxes, consecutive boxes are merged into ranges in program order.
    """
    nodes = list(graph_json.get("nodes") or [])
    order = {n["id"]: i for i, n in enumerate(nodes)}
    by_id = {n["id"]: n for n in nodes}
    label_ids = {n["id"] for n in nodes if _is_label(n)}
    drawn = [n for n in nodes if n["id"] not in label_ids]
    chains, glabels = _chains(graph_json, drawn)
    expanded = _choose_expanded(chains, max_nodes)
    unit_of: dict[str, str] = {}
    members: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for n in drawn:
        key = "n:" + n["id"]
        for gid in chains[n["id"]]:
            if gid not in expanded:
                key = "g:" + gid
                break
        unit_of[n["id"]] = key
        members[key].append(n)
    keys = sorted(members, key=lambda k: order[members[k][0]["id"]])
    if len(keys) > max_nodes:  # merge consecutive boxes into program-order ranges
        size = -(-len(keys) // max_nodes)
        remap = {k: f"r:{i // size}" for i, k in enumerate(keys)}
        merged: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for k in keys:
            merged[remap[k]].extend(members[k])
        unit_of = {nid: remap[k] for nid, k in unit_of.items()}
        members, keys = merged, sorted(merged, key=lambda k: int(k[2:]))
    in_labels: dict[str, list[str]] = defaultdict(list)
    edges: Counter[tuple[str, str]] = Counter()
    for e in graph_json.get("edges") or []:
        src, dst = e.get("src"), e.get("dst")
        if src not in by_id or dst not in unit_of:
            continue
        if src in label_ids:
            in_labels[unit_of[dst]].append(str(by_id[src].get("label") or src))
        elif unit_of[src] != unit_of[dst]:
            edges[(unit_of[src], unit_of[dst])] += 1
    boxes = [_box(k, members[k], glabels, in_labels.get(k, [])) for k in keys]
    pos, width, height = _layout(boxes, list(edges))
    return _draw(boxes, pos, edges, width, height, title, len(drawn), len(label_ids))


def _box(
    key: str, members: list[dict[str, Any]], glabels: dict[str, str], ins: list[str]
) -> dict[str, Any]:
    phases = Counter(n.get("phase") for n in members if n.get("phase"))
    phase = phases.most_common(1)[0][0] if phases else None
    if key.startswith("n:"):
        n = members[0]
        line = f" · L{n['line']}" if n.get("line") is not None else ""
        lines = [str(n.get("label") or n.get("op")), f"{n.get('shape') or ''}{line}"]
        kind = "fusion" if n.get("kind") == "fusion" else str(n.get("kind") or "op")
    else:
        ops = Counter(str(n.get("op")) for n in members)
        name = (
            glabels.get(key[2:], key[2:]) if key.startswith("g:") else f"ops {order_range(members)}"
        )
        lines = [f"▸ {name}", f"{len(members)} ops", ", ".join(op for op, _ in ops.most_common(3))]
        kind = "group"
    if ins:
        uniq = list(dict.fromkeys(ins))
        lines.append("← " + ", ".join(uniq[:2]) + (f" +{len(uniq) - 2}" if len(uniq) > 2 else ""))
    limit = int((_MAXW - 14) / _CH)
    lines = [t if len(t) <= limit else t[: limit - 1] + "…" for t in lines]
    w = min(_MAXW, max(70.0, max(len(t) for t in lines) * _CH + 14))
    return {
        "key": key,
        "lines": lines,
        "w": w,
        "h": len(lines) * _LINE + 8,
        "kind": kind,
        "phase": phase,
    }


def order_range(members: list[dict[str, Any]]) -> str:
    return f"{members[0]['id']}…{members[-1]['id']}"


def _layout(
    boxes: list[dict[str, Any]], edges: list[tuple[str, str]]
) -> tuple[dict[str, tuple[float, float]], float, float]:
    keys = [b["key"] for b in boxes]
    idx = {k: i for i, k in enumerate(keys)}
    succ: list[list[int]] = [[] for _ in keys]
    pred: list[list[int]] = [[] for _ in keys]
    for a, b in edges:
        i, j = idx[a], idx[b]
        if i < j:  # boxes are in program order: a later-to-earlier edge is a back edge
            succ[i].append(j)
            pred[j].append(i)
    layer = [0] * len(keys)
    for j in range(len(keys)):
        layer[j] = max((layer[i] + 1 for i in pred[j]), default=0)
    rows: dict[int, list[int]] = defaultdict(list)
    for i, lv in enumerate(layer):
        rows[lv].append(i)
    x = [0.0] * len(keys)

    def pack(row: list[int]) -> None:
        total = sum(boxes[i]["w"] for i in row) + _HGAP * (len(row) - 1)
        cx = -total / 2
        for i in row:
            x[i] = cx + boxes[i]["w"] / 2
            cx += boxes[i]["w"] + _HGAP

    for row in rows.values():
        pack(row)
    levels = sorted(rows)
    for sweep in range(4):
        for lv in levels if sweep % 2 == 0 else reversed(levels):
            nb = pred if sweep % 2 == 0 else succ
            bary = {i: (sum(x[j] for j in nb[i]) / len(nb[i]) if nb[i] else x[i]) for i in rows[lv]}
            rows[lv].sort(key=bary.__getitem__)
            pack(rows[lv])
    min_x = min((x[i] - boxes[i]["w"] / 2 for i in range(len(keys))), default=0.0)
    max_x = max((x[i] + boxes[i]["w"] / 2 for i in range(len(keys))), default=0.0)
    heights = [max(boxes[i]["h"] for i in rows[lv]) + _VGAP for lv in levels]
    width = max_x - min_x
    # A long program is a tall thin column: wrap the layers into side-by-side bands (≈16:10).
    total = sum(heights)
    bands = 1
    if len(levels) > 4 and total > max(2 * width, 600.0):
        fit = round((total * 1.6 / max(width, 1.0)) ** 0.5)
        bands = max(1, min(len(levels), fit, int(1600 // max(width + 40, 1.0)) or 1))
    per = -(-len(levels) // bands)
    pos: dict[str, tuple[float, float]] = {}
    band_h = 0.0
    for b in range(bands):
        y = 0.0
        for k in range(b * per, min(len(levels), (b + 1) * per)):
            for i in rows[levels[k]]:
                pos[keys[i]] = (b * (width + 40) + x[i] - boxes[i]["w"] / 2 - min_x, y)
            y += heights[k]
        band_h = max(band_h, y)
    return pos, bands * (width + 40) - 40, max(0.0, band_h - _VGAP)


def _draw(
    boxes: list[dict[str, Any]],
    pos: dict[str, tuple[float, float]],
    edges: Counter[tuple[str, str]],
    width: float,
    height: float,
    title: str | None,
    n_drawn: int,
    n_labels: int,
) -> str:
    m = 12.0
    top = 22.0 if title else 0.0
    foot = 18.0
    note = f"{len(boxes)} boxes for {n_drawn} ops" + (
        f"; {n_labels} parameters/scalars shown as labels" if n_labels else ""
    )
    W = max(width + 2 * m, len(title or "") * 8.0 + 2 * m, len(note) * 6.2 + 2 * m)
    H = height + 2 * m + top + foot
    by_key = {b["key"]: b for b in boxes}
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W:.0f}" height="{H:.0f}" viewBox="0 0 {W:.0f} {H:.0f}" '
        f'font-family="DejaVu Sans Mono, Menlo, Consolas, monospace" font-size="11">',
        f'<rect width="{W:.0f}" height="{H:.0f}" fill="#ffffff"/>',
    ]
    if title:
        out.append(
            f'<text x="{m}" y="{m + 10}" font-size="13" font-weight="bold" fill="#222">{escape(title)}</text>'
        )
    out.append('<g fill="none" stroke="#777" stroke-opacity="0.6">')
    for (a, b), count in edges.items():
        (x1, y1), (x2, y2) = pos[a], pos[b]
        pa, pb = by_key[a], by_key[b]
        sx, sy = m + x1 + pa["w"] / 2, m + top + y1 + pa["h"]
        tx, ty = m + x2 + pb["w"] / 2, m + top + y2
        dy = max(14.0, abs(ty - sy) / 2)
        sw = min(4.0, 1 + (count.bit_length() - 1) / 2)
        faint = ' stroke-opacity="0.25"' if ty < sy else ""  # edges between wrapped bands
        out.append(
            f'<path d="M{sx:.1f},{sy:.1f} C{sx:.1f},{sy + dy:.1f} {tx:.1f},{ty - dy:.1f} {tx:.1f},{ty:.1f}" '
            f'stroke-width="{sw:.1f}"{faint}/>'
        )
    out.append("</g>")
    for b in boxes:
        x, y = pos[b["key"]]
        fill, stroke = _PHASE.get(b["phase"] or "", _FILL.get(b["kind"], _FILL["op"]))
        dash = ' stroke-dasharray="4 2"' if b["kind"] == "group" else ""
        out.append(
            f'<g transform="translate({m + x:.1f},{m + top + y:.1f})"><rect width="{b["w"]:.1f}" height="{b["h"]}" '
            f'rx="4" fill="{fill}" stroke="{stroke}"{dash}/>'
        )
        for i, t in enumerate(b["lines"]):
            style = ' font-weight="bold" fill="#111"' if i == 0 else ' fill="#555"'
            out.append(f'<text x="7" y="{15 + i * _LINE}"{style}>{escape(t)}</text>')
        out.append("</g>")
    out.append(
        f'<text x="{m}" y="{H - 6:.0f}" fill="#666" font-size="10">{escape(note)}</text></svg>'
    )
    return "".join(out)
