"""A layered (Sugiyama) layout of the children of one box: the port of ``js/layout.js``.

The static picture must draw what the widget draws, so this is a line-by-line port of the front
end's layout (same steps, same order of floating-point operations, same tie-breaking; see that
file for the method): ``rank`` gives layers and the edges drawn upwards, ``layout_box`` places
the children with ports and dummy chains. ``tests/widgets/test_layout_parity.py`` runs both on
real reports and compares the coordinates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .layout_passes import cross_between as _cross_between
from .layout_passes import frac as _frac
from .layout_passes import relax_layer as _relax_layer
from .layout_passes import transpose as _transpose

__all__ = [
    "GAP",
    "BoxLayout",
    "Ranked",
    "bottom_port",
    "edge_key",
    "follow_rank",
    "layout_box",
    "mirror_rank",
    "rank",
    "top_port",
]

GAP = {"node": 18.0, "dummy": 8.0, "layer": 30.0, "port": 16.0, "dummyW": 6.0, "column": 96.0}
SWEEPS = 8
RELAX = 8
TRANSPOSE_MAX = 4
WORK = 12000  # bounded work: boxes with many dummy nodes get fewer passes (at least 2)


def _passes(most: int, n: int) -> int:
    return max(2, min(most, WORK // max(1, n)))


_SEP = "\u0001"


def top_port(k: str) -> str:
    return "\u0002t" + k


def bottom_port(k: str) -> str:
    return "\u0002b" + k


def edge_key(a: str, b: str) -> str:
    return a + _SEP + b


@dataclass
class Ranked:
    layer: dict[str, int]
    dag: list[tuple[str, str]]
    reversed: set[str]
    flat: list[tuple[str, str]] = field(default_factory=list)  # edges within one layer
    columns: dict[str, int] | None = None  # two facing columns (mirror_rank)
    #: rows shared with a box beside it (scene.py): a top port layer, minimum band heights
    force_top: bool = False
    min_bands: list[float] | None = None


@dataclass
class BoxLayout:
    pos: dict[str, tuple[float, float]]
    width: float
    height: float
    bands: list[tuple[float, float]]
    layer_of: dict[str, int]
    chains: dict[str, list[tuple[float, int]]]
    port_top: dict[str, float] = field(default_factory=dict)
    port_bottom: dict[str, float] = field(default_factory=dict)
    bottom_layer: int = 0


def rank(keys: list[str], edges: list[tuple[str, str]]) -> Ranked:
    """Layers of one box's children (``rank`` in js/layout.js)."""
    n = len(keys)
    idx = {k: i for i, k in enumerate(keys)}
    out: list[list[int]] = [[] for _ in range(n)]
    seen: set[int] = set()
    for a, b in edges:
        i, j = idx.get(a), idx.get(b)
        if i is None or j is None or i == j:
            continue
        k = i * n + j
        if k in seen:
            continue
        seen.add(k)
        out[i].append(j)
    state = [0] * n
    dag_seen: set[int] = set()
    dag: list[tuple[int, int]] = []
    reversed_: set[str] = set()

    def add_dag(i: int, j: int) -> None:
        k = i * n + j
        if k not in dag_seen:
            dag_seen.add(k)
            dag.append((i, j))

    for s in range(n):
        if state[s]:
            continue
        stack = [[s, 0]]
        state[s] = 1
        while stack:
            top = stack[-1]
            v, k = top
            if k < len(out[v]):
                top[1] = k + 1
                u = out[v][k]
                if state[u] == 1:
                    add_dag(u, v)
                    reversed_.add(edge_key(keys[v], keys[u]))
                else:
                    add_dag(v, u)
                    if state[u] == 0:
                        state[u] = 1
                        stack.append([u, 0])
            else:
                state[v] = 2
                stack.pop()
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for i, j in dag:
        succ[i].append(j)
        indeg[j] += 1
    layer = [0] * n
    topo = [i for i in range(n) if indeg[i] == 0]
    q = 0
    while q < len(topo):
        i = topo[q]
        q += 1
        for j in succ[i]:
            layer[j] = max(layer[j], layer[i] + 1)
            indeg[j] -= 1
            if indeg[j] == 0:
                topo.append(j)
    for t in range(len(topo) - 1, -1, -1):
        i = topo[t]
        if not succ[i]:
            continue
        layer[i] = max(layer[i], min(layer[j] for j in succ[i]) - 1)
    dense = {v: i for i, v in enumerate(sorted(set(layer)))}
    return Ranked(
        {k: dense[layer[i]] for i, k in enumerate(keys)},
        [(keys[i], keys[j]) for i, j in dag],
        reversed_,
    )


def mirror_rank(
    keys: list[str],
    edges: list[tuple[str, str]],
    columns: dict[str, int],
    partner: dict[str, str],
    given: dict[str, int] | None = None,
    across: dict[str, list[str]] | None = None,
) -> Ranked:
    """Layers of a box drawn as two facing columns (``mirrorRank`` in js/layout.js): column 0
    ranked alone, a mirrored column-1 child in its partner's layer, another in the deepest layer
    of the column-0 children it touches (in ``given``, with ``across``: key -> the forward
    group's children it touches), else one row above the column-1 children it reads, else
    below all;
    edges within a layer are ``flat``."""
    left = [k for k in keys if columns.get(k) == 0]
    in_left = set(left)
    layer = dict(rank(left, [(a, b) for a, b in edges if a in in_left and b in in_left]).layer)
    src = layer if given is None else given  # given: the partners' layers in another box
    below = 0
    for lay in src.values():
        below = max(below, lay + 1)
    right = [k for k in keys if columns.get(k) == 1]
    for k in right:
        if partner.get(k) in src:
            layer[k] = src[partner[k]]
    near: dict[str, list[str]] = {}
    for a, b in edges:
        near.setdefault(a, []).append(b)
        near.setdefault(b, []).append(a)
    # facing the forward values it reads (a residual, an input)
    for k in right:
        if k in layer:
            continue
        found = -1
        for j in near.get(k, []):
            if columns.get(j) == 0 and j in src:
                found = max(found, src[j])
        for j in (across or {}).get(k, []):
            if j in src:
                found = max(found, src[j])
        if found >= 0:
            layer[k] = found
    # the rest of the backward column runs up from what it reads (``mirrorRank``)
    preds: dict[str, list[str]] = {}
    succs: dict[str, list[str]] = {}
    for a, b in edges:
        if columns.get(a) != 1 or columns.get(b) != 1 or a == b:
            continue
        preds.setdefault(b, []).append(a)
        succs.setdefault(a, []).append(b)
    for k in reversed(right):
        if k in layer:
            continue
        down = [layer[j] + 1 for j in succs.get(k, []) if j in layer]
        if down:
            layer[k] = max(down)
    for k in right:
        if k in layer:
            continue
        up = [layer[j] for j in preds.get(k, []) if j in layer]
        layer[k] = max(0, min(up) - 1) if up else below
    if given is None:
        dense = {v: i for i, v in enumerate(sorted(set(layer.values())))}
        layer = {k: dense[v] for k, v in layer.items()}
    dag: list[tuple[str, str]] = []
    flat: list[tuple[str, str]] = []
    reversed_: set[str] = set()
    seen: set[str] = set()
    for a, b in edges:
        if a not in layer or b not in layer or a == b:
            continue
        la, lb = layer[a], layer[b]
        u, v = (a, b) if la <= lb else (b, a)
        if la > lb:
            reversed_.add(edge_key(a, b))
        if edge_key(u, v) in seen:
            continue
        seen.add(edge_key(u, v))
        (flat if la == lb else dag).append((u, v))
    return Ranked(layer, dag, reversed_, flat, columns)


def follow_rank(
    keys: list[str],
    edges: list[tuple[str, str]],
    partner: dict[str, str],
    given: dict[str, int],
    across: dict[str, list[str]] | None = None,
) -> Ranked:
    """Layers of a backward group's children level with its forward group's (``followRank``):
    each child in its partner's layer of ``given``, one straight column."""
    return mirror_rank(keys, edges, dict.fromkeys(keys, 1), partner, given, across)


def layout_box(
    items: list[tuple[str, float, float]],
    ranked: Ranked,
    ports: dict[str, list[str]] | None = None,
    attach: dict[str, tuple[float, float]] | None = None,
    g: dict[str, float] = GAP,
) -> BoxLayout:
    """Coordinates of one box's children (``layoutBox`` in js/layout.js); items: (key, w, h);
    ``attach``: edge key -> px offsets from the centres where the edge meets its two ends."""
    ports = ports or {"top": [], "bottom": []}
    attach = attach or {}
    keys: list[Any] = []
    widths: list[float] = []
    heights: list[float] = []
    layer_ix: list[int] = []
    real: list[bool] = []
    idx: dict[str, int] = {}
    shift = 1 if ports["top"] or ranked.force_top else 0
    max_l = -1
    columns = ranked.columns  # two facing columns (mirror_rank)
    col: list[int] = []

    def add(key: Any, w: float, h: float, lay: int, is_real: bool, c: int = 0) -> int:
        col.append(c)
        keys.append(key)
        widths.append(w)
        heights.append(h)
        layer_ix.append(lay)
        real.append(is_real)
        return len(keys) - 1

    for key, w, h in items:
        lay = ranked.layer[key] + shift
        idx[key] = add(key, w, h, lay, True, (columns.get(key) or 0) if columns else 0)
        max_l = max(max_l, lay)
    bottom_l = max_l + 1
    for k in ports["top"]:
        idx[top_port(k)] = add(top_port(k), g["dummyW"], 0.0, 0, False, col[idx[k]])
    for k in ports["bottom"]:
        idx[bottom_port(k)] = add(bottom_port(k), g["dummyW"], 0.0, bottom_l, False, col[idx[k]])
    n_layers = bottom_l + 1 if ports["bottom"] else bottom_l
    edges = list(ranked.dag)
    edges += [(top_port(k), k) for k in ports["top"]]
    edges += [(k, bottom_port(k)) for k in ports["bottom"]]
    # neighbour lists: (node, weight, px offset of the attachment on it, fraction for ordering,
    # the same fraction on this node)
    up: list[list[tuple[int, int, float, float, float]]] = [[] for _ in keys]
    down: list[list[tuple[int, int, float, float, float]]] = [[] for _ in keys]

    def link(i: int, j: int, off_i: float = 0.0, off_j: float = 0.0) -> None:
        w = 8 if not real[i] and not real[j] else 2 if not real[i] or not real[j] else 1
        fi, fj = _frac(off_i, widths[i]), _frac(off_j, widths[j])
        down[i].append((j, w, off_j, fj, fi))
        up[j].append((i, w, off_i, fi, fj))

    chain_idx: dict[str, list[int]] = {}
    for a, b in edges:
        first = prev = idx[a]
        last = idx[b]
        off_a, off_b = attach.get(edge_key(a, b), (0.0, 0.0))
        dummies = []
        for lay in range(layer_ix[prev] + 1, layer_ix[last]):
            d = add(None, g["dummyW"], 0.0, lay, False, col[last])
            up.append([])
            down.append([])
            link(prev, d, off_a if prev == first else 0.0, 0.0)
            dummies.append(d)
            prev = d
        link(prev, last, off_a if prev == first else 0.0, off_b)
        chain_idx[edge_key(a, b)] = dummies
    for a, b in ranked.flat:
        chain_idx[edge_key(a, b)] = []  # sideways, no layer crossed
    n = len(keys)
    layers: list[list[int]] = [[] for _ in range(n_layers)]
    for i in range(n):
        layers[layer_ix[i]].append(i)
    pos = [0.0] * n

    def renumber(lay: int) -> None:
        if columns:  # every layer keeps column 0 left of column 1 (a stable partition)
            layers[lay] = [i for i in layers[lay] if not col[i]] + [
                i for i in layers[lay] if col[i]
            ]
        for k, i in enumerate(layers[lay]):
            pos[i] = k

    for lay in range(n_layers):
        renumber(lay)

    def crossings() -> int:
        return sum(
            _cross_between(layers[lay], down, pos, len(layers[lay + 1]))
            for lay in range(n_layers - 1)
        )

    best = [list(layer) for layer in layers]
    best_c = crossings()
    sweeps, tpasses, relax = _passes(SWEEPS, n), _passes(TRANSPOSE_MAX, n), _passes(RELAX, n)
    sweep = 0
    while sweep < sweeps and best_c > 0:
        downward = sweep % 2 == 0
        order = list(range(n_layers)) if downward else list(range(n_layers - 1, -1, -1))
        nb = up if downward else down
        for lay in order:
            bary = {}
            for i in layers[lay]:
                lst = nb[i]
                if not lst:
                    bary[i] = pos[i]
                    continue
                s = 0.0
                for j, _w, _o, fr, _own in lst:
                    s += pos[j] + fr
                bary[i] = s / len(lst)
            layers[lay].sort(key=lambda i: (bary[i], pos[i]))
            renumber(lay)
        _transpose(layers, up, down, pos, renumber, tpasses, col if columns else None)
        c = crossings()
        if c < best_c:
            best_c = c
            best = [list(layer) for layer in layers]
        sweep += 1
    for lay in range(n_layers):
        layers[lay] = best[lay]
        renumber(lay)

    def sep(i: int, j: int) -> float:
        return (widths[i] + widths[j]) / 2 + (g["node"] if real[i] and real[j] else g["dummy"])

    x = [0.0] * n
    for layer in layers:
        cx = 0.0
        for k, i in enumerate(layer):
            if k:
                cx += sep(layer[k - 1], i)
            x[i] = cx
    for p in range(0 if columns else relax):
        for lay in range(n_layers) if p % 2 == 0 else range(n_layers - 1, -1, -1):
            _relax_layer(layers[lay], x, up, down, sep)
    # Straighten long edges: move a whole dummy chain to one x where every layer has room.
    slot = [0] * n
    for layer in layers:
        for k, i in enumerate(layer):
            slot[i] = k

    def fits(d: int, tx: float) -> bool:
        layer, k = layers[layer_ix[d]], slot[d]
        if k > 0 and tx - x[layer[k - 1]] < sep(layer[k - 1], d) - 1e-9:
            return False
        return not (k + 1 < len(layer) and x[layer[k + 1]] - tx < sep(d, layer[k + 1]) - 1e-9)

    for dummies in chain_idx.values():
        if len(dummies) < 2 or columns:
            continue
        xs = sorted(x[d] for d in dummies)
        for tx in (xs[len(xs) >> 1], x[dummies[0]], x[dummies[-1]]):
            if all(fits(d, tx) for d in dummies):
                for d in dummies:
                    x[d] = tx
                break
    if columns:
        _column_x(layers, col, widths, x, sep, g["column"])
    min_x, max_x = float("inf"), float("-inf")
    for i in range(n):
        min_x = min(min_x, x[i] - widths[i] / 2)
        max_x = max(max_x, x[i] + widths[i] / 2)
    if not n:
        min_x = max_x = 0.0
    bands: list[tuple[float, float]] = []
    y = 0.0
    least = ranked.min_bands or []
    for lay in range(n_layers):
        h = least[lay] if lay < len(least) else 0.0
        for i in layers[lay]:
            if real[i]:
                h = max(h, heights[i])
        if lay > 0:
            y += (
                g["port"]
                if (lay == 1 and shift) or (lay == bottom_l and ports["bottom"])
                else g["layer"]
            )
        bands.append((y, y + h))
        y += h
    out = BoxLayout(
        pos={},
        width=max_x - min_x,
        height=y,
        bands=bands,
        layer_of={},
        chains={},
        bottom_layer=bottom_l,
    )
    for i in range(n):
        if real[i]:
            out.pos[keys[i]] = (x[i] - widths[i] / 2 - min_x, bands[layer_ix[i]][0])
            out.layer_of[keys[i]] = layer_ix[i]
    for k in ports["top"]:
        out.port_top[k] = x[idx[top_port(k)]] - min_x
    for k in ports["bottom"]:
        out.port_bottom[k] = x[idx[bottom_port(k)]] - min_x
    for key, dummies in chain_idx.items():
        out.chains[key] = [(x[d] - min_x, layer_ix[d]) for d in dummies]
    return out


def _column_x(
    layers: list[list[int]],
    col: list[int],
    widths: list[float],
    x: list[float],
    sep: Any,
    gap: float,
) -> None:
    """Two straight columns (``columnX``): each layer's column-0 boxes side by side on one
    axis, its column-1 boxes on a second axis a gap right of the widest column-0 row."""
    width = [0.0, 0.0]
    rows = []
    for layer in layers:
        pair = []
        for c in (0, 1):
            row = [i for i in layer if col[i] == c]
            cx = 0.0
            for k, i in enumerate(row):
                if k:
                    cx += sep(row[k - 1], i)
                x[i] = cx
            w = cx + (widths[row[0]] + widths[row[-1]]) / 2 if row else 0.0
            width[c] = max(width[c], w)
            pair.append((row, w))
        rows.append(pair)
    for pair in rows:
        for c, (row, w) in enumerate(pair):
            left = (width[0] + gap if c else 0.0) + (width[c] - w) / 2
            left += widths[row[0]] / 2 if row else 0.0
            for i in row:
                x[i] += left
