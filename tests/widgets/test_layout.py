"""The graph layout (nbcompile/report/scene.py, the port of js/scene.js): what a person sees.

Boxes never overlap, edges never run through a box (a node, a collapsed group, or an expanded
group that holds neither end), every edge starts at its upper box and ends at its lower one,
work stays bounded on big graphs, and the static picture draws exactly the scene's boxes.
"""

from __future__ import annotations

import gzip
import itertools
import json
import re
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from nbcompile.report.graphmodel import ancestors, prepare_graph
from nbcompile.report.scene import (
    INITIAL_LIMIT,
    Scene,
    build_scene,
    initial_expansion,
    path_data,
)
from nbcompile.report.svg import BUDGET, graph_scene, graph_svg

SVG_NS = "{http://www.w3.org/2000/svg}"
DATA = Path(__file__).resolve().parents[1] / "data" / "layout"


def _as_drawn(d: str) -> list[tuple[float, float]]:
    """The path as drawn (scene.path_data: M, relative v and c), cubics in 8 pieces."""
    out: list[tuple[float, float]] = []
    x = y = 0.0
    for cmd, args in re.findall(r"([MvcC])([^MvcC]*)", d):
        nums = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", args)]
        if cmd == "M":
            x, y = nums
            out.append((x, y))
        elif cmd == "v":
            y += nums[0]
            out.append((x, y))
        else:
            c1x, c1y, c2x, c2y, ex, ey = (
                nums
                if cmd == "C"
                else [x + nums[0], y + nums[1], x + nums[2], y + nums[3], x + nums[4], y + nums[5]]
            )
            for i in range(1, 9):
                t, u = i / 8, 1 - i / 8
                out.append(
                    (
                        u**3 * x + 3 * u * u * t * c1x + 3 * u * t * t * c2x + t**3 * ex,
                        u**3 * y + 3 * u * u * t * c1y + 3 * u * t * t * c2y + t**3 * ey,
                    )
                )
            x, y = ex, ey
    return out


def _hits(p: tuple[float, float], q: tuple[float, float], r: tuple[float, ...]) -> bool:
    """Does segment pq run through the inside of rectangle r (x, y, w, h), shrunk by 1 px?"""
    x0, y0, x1, y1 = r[0] + 1, r[1] + 1, r[0] + r[2] - 1, r[1] + r[3] - 1
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


def check_scene(pg: Any, scene: Scene) -> None:
    boxes = {k: b for k, b in scene.boxes.items() if k != "root"}
    # siblings never overlap (nested boxes sit inside their group)
    for box in scene.boxes.values():
        kids = box.children or []
        for i, a in enumerate(kids):
            if box.key != "root":
                assert box.x <= a.x and a.x + a.w <= box.x + box.w + 1e-6, (box.key, a.key)
                assert box.y <= a.y and a.y + a.h <= box.y + box.h + 1e-6, (box.key, a.key)
            for b in kids[i + 1 :]:
                assert (
                    a.x + a.w <= b.x or b.x + b.w <= a.x or a.y + a.h <= b.y or b.y + b.h <= a.y
                ), ("overlap", a.key, b.key)
    for e in scene.edges:
        upper, lower = (
            (scene.boxes[e.v], scene.boxes[e.u]) if e.up else (scene.boxes[e.u], scene.boxes[e.v])
        )
        (x0, y0), (x1, y1) = e.points[0], e.points[-1]
        if e.flat:  # sideways: from the side of the end, or of a group holding it, to the other's
            on_side = [
                [
                    b
                    for b in map(scene.boxes.get, chain)
                    if x in (b.x, b.x + b.w) and y == b.y + b.h / 2
                ]
                for chain, (x, y) in ((e.cu, (x0, y0)), (e.cv, (x1, y1)))
            ]
            assert all(on_side), (e.u, e.v, e.points)
            assert len(e.points) in (2, 4)  # straight across, or around along the gap below
        else:
            assert upper.x <= x0 <= upper.x + upper.w and abs(y0 - (upper.y + upper.h)) < 1e-6
            assert lower.x <= x1 <= lower.x + lower.w and abs(y1 - lower.y) < 1e-6
    rects = {k: (b.x, b.y, b.w, b.h) for k, b in boxes.items()}
    through = edges_through(pg, rects, [(e.u, e.v, e.points) for e in scene.edges])
    assert not through, [f"edge {u} -> {v} runs through {key}" for u, v, key in through]


def edges_through(
    pg: Any,
    rects: dict[str, tuple[float, ...]],
    edges: list[tuple[str, str, list[Any]]],
) -> list[tuple[str, str, str]]:
    """(source, target, box) for each edge that, as drawn, runs through a box (x, y, w, h) that
    is neither of its ends nor a group holding one (js/bench/layout-bench.mjs counts the same)."""
    out = []
    for u, v, points in edges:
        allowed = {u, v} | {"g:" + g for g in ancestors(pg, u) + ancestors(pg, v)}
        curve = _as_drawn(path_data([tuple(p) for p in points]))
        for key, rect in rects.items():
            if key in allowed or key == "root":
                continue
            if any(_hits(p, q, rect) for p, q in itertools.pairwise(curve)):
                out.append((u, v, key))
    return out


@pytest.mark.parametrize("which", ["traced", "compiled"])
@pytest.mark.parametrize("name", ["small_report", "big_report"])
def test_no_overlaps_and_no_edge_through_a_box(request, name, which):
    report = request.getfixturevalue(name)
    pg, scene = graph_scene(report["graphs"][which], report)
    assert 3 <= sum(b.children is None for b in scene.boxes.values()) <= 400
    check_scene(pg, scene)


def layout_case(name: str) -> dict[str, Any]:
    """A report kept for a layout case it once drew wrong (tests/data/layout/NAME.json.gz)."""
    return json.loads(gzip.decompress((DATA / f"{name}.json.gz").read_bytes()))


def test_no_edge_through_the_box_beside_a_merged_backward_chunk():
    """A train step's compiled graph (tutorial 10's ``value_and_grad(net)``, the layout corpus's
    10-00) at the layout bench's expansion: the forward blocks open, their backward twins merge into chunks
    (``blocks_2 (backward) + blocks_3 (backward)``) with ``blocks_3 (backward)`` just left of the
    chunk in its row. The sideways line from inside ``blocks_2`` to that chunk cleared
    ``blocks_3 (backward)``'s corner by 0.05 px as computed and ran 1 px into it as drawn (whole
    pixels); it now keeps clear of other boxes or leaves from an outer pair."""
    report = layout_case("value_and_grad_net")
    pg = prepare_graph(report["graphs"]["compiled"], report)
    check_scene(pg, build_scene(pg, initial_expansion(pg, INITIAL_LIMIT, BUDGET)))


def test_gradient_graph_of_a_real_grad_compile(report_fixtures):
    import jax.numpy as jnp

    import nbcompile

    def loss(w, x):
        h = jnp.tanh(x @ w)
        return jnp.mean(h * h)

    report = nbcompile.compile(loss, jnp.ones((8, 16)), jnp.ones((4, 8)), grad=0).report()
    for which in ("traced", "compiled", "gradient", "gradient_compiled"):
        pg, scene = graph_scene(report["graphs"][which], report)
        check_scene(pg, scene)
    svg = graph_svg(report["graphs"]["gradient"], report, color="phase")
    painted = set(re.findall(r'<rect width="[^"]+" height="[^"]+" rx="\d" class="(f-\w+)"', svg))
    assert {"f-forward", "f-backward"} <= painted  # forward and backward ops coloured by phase


def _drawn(svg: str) -> list[tuple[float, float, float, float]]:
    root = ET.fromstring(svg)
    out = []
    for g in root.iter(SVG_NS + "g"):
        m = re.match(r"translate\(([-\d.]+),([-\d.]+)\)$", g.get("transform", ""))
        rect = g.find(SVG_NS + "rect")
        if m and rect is not None and g.find(SVG_NS + "text") is not None:
            out.append(
                (float(m[1]), float(m[2]), float(rect.get("width")), float(rect.get("height")))
            )
    return out


def test_the_picture_draws_the_scene(big_report):
    graph = big_report["graphs"]["compiled"]
    _pg, scene = graph_scene(graph, big_report)
    drawn = _drawn(graph_svg(graph, big_report))
    leaves = [b for b in scene.boxes.values() if b.children is None]
    assert len(drawn) == len(leaves)
    for (x, y, w, h), b in zip(drawn, leaves, strict=True):
        assert abs(x - b.x) < 0.06 and abs(y - b.y) < 0.06 and abs(w - b.w) < 0.06 and h == b.h


def test_work_stays_bounded_on_a_flat_graph_five_times_bigger():
    n = 6000
    nodes = [
        {
            "id": f"k{i}",
            "op": "fusion",
            "kind": "fusion",
            "shape": "f32[4]",
            "bytes": 16,
            "group": None,
            "path": "",
            "line": None,
        }
        for i in range(n)
    ]
    edges = [
        {"src": f"k{i}", "dst": f"k{j}", "bytes": 16, "shape": "f32[4]"}
        for i in range(n)
        for j in (i + 1, i + 7, i + 50)
        if j < n
    ]
    graph = {"nodes": nodes, "edges": edges, "groups": []}
    t0 = time.perf_counter()
    pg, scene = graph_scene(graph)
    elapsed = time.perf_counter() - t0
    leaves = sum(b.children is None for b in scene.boxes.values())
    assert 1 <= leaves <= 400
    assert elapsed < 5.0, elapsed  # generous: the machine is shared; the benchmark has the figure
    check_scene(pg, scene)
