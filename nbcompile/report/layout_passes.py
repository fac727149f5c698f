"""The passes of :mod:`.layout` (ports of the helpers in ``js/layout.js``): crossings between
two layers, adjacent swaps, and one layer's placement by weighted isotonic regression."""

from __future__ import annotations

from typing import Any

__all__ = ["cross_between", "frac", "gain", "relax_layer", "transpose"]


def frac(off: float, w: float) -> float:
    return max(-0.45, min(0.45, off / max(w, 1)))


def cross_between(
    upper: list[int],
    down: list[list[tuple[int, int, float, float, float]]],
    pos: list[float],
    size: int,
) -> int:
    ends: list[float] = []
    for i in upper:
        # this node's edges in port order, then by their lower end
        ends.extend(p for _own, p in sorted((own, pos[j] + fr) for j, _w, _o, fr, own in down[i]))
    if len(ends) < 2:
        return 0
    rank_of = {p: r for r, p in enumerate(sorted(set(ends)))}
    size = len(rank_of)
    tree = [0] * (size + 1)
    c = 0
    for seen, q in enumerate(ends):
        p = rank_of[q]
        le = 0
        k = p + 1
        while k > 0:
            le += tree[k]
            k -= k & -k
        c += seen - le
        k = p + 1
        while k <= size:
            tree[k] += 1
            k += k & -k
    return c


def transpose(
    layers: list[list[int]],
    up: list[list[tuple[int, int, float, float, float]]],
    down: list[list[tuple[int, int, float, float, float]]],
    pos: list[float],
    renumber: Any,
    most: int,
    cols: list[int] | None = None,
) -> None:
    # Swapping u and v (neighbours in a layer) changes the crossings of their edges with each
    # other only: (pairs a of u, b of v with a right of b) - (pairs with a left of b).
    for _ in range(most):
        improved = False
        for layer in layers:
            for k in range(len(layer) - 1):
                u, v = layer[k], layer[k + 1]
                if cols is not None and cols[u] != cols[v]:
                    continue  # two facing columns never swap across
                diff = gain(up[u], up[v], pos) + gain(down[u], down[v], pos)
                if diff > 0:
                    layer[k], layer[k + 1] = v, u
                    pos[u] = k + 1
                    pos[v] = k
                    improved = True
        if not improved:
            break
    for lay in range(len(layers)):
        renumber(lay)


def gain(nu: list[tuple[int, int]], nv: list[tuple[int, int]], pos: list[float]) -> int:
    if not nu or not nv:
        return 0
    d = 0
    for a, _w, _o, fa, _fa in nu:
        pa = pos[a] + fa
        for b, _w2, _o2, fb, _fb in nv:
            pb = pos[b] + fb
            if pa > pb:
                d += 1
            elif pa < pb:
                d -= 1
    return d


def relax_layer(
    layer: list[int],
    x: list[float],
    up: list[list[tuple[int, int, float, float, float]]],
    down: list[list[tuple[int, int, float, float, float]]],
    sep: Any,
) -> None:
    n = len(layer)
    if not n:
        return
    off = [0.0] * n
    for k in range(1, n):
        off[k] = off[k - 1] + sep(layer[k - 1], layer[k])
    vals: list[float] = []
    wts: list[float] = []
    cnts: list[int] = []
    for k in range(n):
        i = layer[k]
        s = w = 0.0
        for j, wt, at, _f, _g in up[i]:
            s += wt * (x[j] + at)
            w += wt
        for j, wt, at, _f, _g in down[i]:
            s += wt * (x[j] + at)
            w += wt
        if w > 0:
            vals.append(s / w - off[k])
            wts.append(w)
        else:
            vals.append(x[i] - off[k])
            wts.append(0.01)
        cnts.append(1)
        while len(vals) > 1 and vals[-2] > vals[-1]:
            v2, w2, c2 = vals.pop(), wts.pop(), cnts.pop()
            v1, w1, c1 = vals.pop(), wts.pop(), cnts.pop()
            vals.append((v1 * w1 + v2 * w2) / (w1 + w2))
            wts.append(w1 + w2)
            cnts.append(c1 + c2)
    k = 0
    for b, v in enumerate(vals):
        for _ in range(cnts[b]):
            x[layer[k]] = v + off[k]
            k += 1
