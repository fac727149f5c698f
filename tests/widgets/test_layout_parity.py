"""The static picture draws what the widget draws: the Python scene (nbcompile/report/scene.py)
equals the front end's (js/scene.js, run under Node) box for box and edge point for point."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from nbcompile.report.graphmodel import prepare_graph
from nbcompile.report.scene import build_scene, initial_expansion

from .test_layout import edges_through, layout_case

REPO = Path(__file__).resolve().parents[2]
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="Node.js runs the front end's layout")


def _python(report: dict[str, Any], limit: int, budget: int) -> dict[str, Any]:
    out = {}
    for which in ("traced", "compiled", "gradient", "gradient_compiled"):
        graph = (report.get("graphs") or {}).get(which)
        if not graph:
            continue
        pg = prepare_graph(graph, report)
        scene = build_scene(pg, initial_expansion(pg, limit, budget, pairs=which == "gradient"))
        out[which] = {
            "boxes": [
                [
                    b.key,
                    b.x,
                    b.y,
                    b.w,
                    b.h,
                    b.lines if b.children is None else None,
                    b.title or None,
                ]
                for b in scene.boxes.values()
            ],
            "edges": [[e.u, e.v, e.count, e.up, [list(p) for p in e.points]] for e in scene.edges],
        }
    return out


def _same(a: Any, b: Any, path: str = "") -> str | None:
    if isinstance(a, bool) or isinstance(b, bool) or isinstance(a, str) or a is None:
        return None if a == b else f"{path}: {a!r} != {b!r}"
    if isinstance(a, int | float) and isinstance(b, int | float):
        return None if abs(a - b) < 1e-6 else f"{path}: {a!r} != {b!r}"
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if (why := _same(x, y, f"{path}[{i}]")) is not None:
                return why
        return None
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return f"{path}: keys {sorted(set(a) ^ set(b))}"
        for k in a:
            if (why := _same(a[k], b[k], f"{path}.{k}")) is not None:
                return why
        return None
    return f"{path}: {a!r} != {b!r}"


def _check(
    report: dict[str, Any], tmp_path: Path, limit: int = 60, budget: int = 400
) -> dict[str, Any]:
    """Both engines lay out ``report`` alike; the front end's scenes (as scene-dump prints them)."""
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    js = json.loads(
        subprocess.run(
            [
                NODE,
                str(REPO / "js" / "tools" / "scene-dump.mjs"),
                str(path),
                str(limit),
                str(budget),
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout
    )
    py = _python(report, limit, budget)
    assert js.keys() == py.keys()
    assert sum(len(v["edges"]) for v in py.values()) > 0
    assert _same(js, py) is None, _same(js, py)
    return js


def test_fixtures_lay_out_identically(small_report, big_report, tmp_path):
    _check(small_report, tmp_path)
    _check(big_report, tmp_path)
    _check(big_report, tmp_path, limit=300)  # deeper expansion: ports and nested groups


def test_real_gradient_report_lays_out_identically(tmp_path, relaxed_dtypes):
    import jax.numpy as jnp

    import nbcompile

    def loss(params, x):
        h = jnp.tanh(x @ params["w1"] + params["b1"])
        return jnp.mean((h @ params["w2"]) ** 2)

    params = {"w1": jnp.ones((16, 32)), "b1": jnp.zeros(32), "w2": jnp.ones((32, 4))}
    _check(nbcompile.compile(loss, params, jnp.ones((8, 16)), grad=0).report(), tmp_path)


def test_front_end_draws_no_edge_through_the_box_beside_a_merged_backward_chunk(tmp_path):
    """The front end's own scene of the case test_layout keeps (a train step whose backward
    blocks merge into chunks), checked as drawn: no edge runs through a box it neither starts nor
    ends in (the layout bench's "edges through boxes" row had these 2), and Python draws the
    same."""
    report = layout_case("value_and_grad_net")
    js = _check(report, tmp_path, limit=60)["compiled"]
    pg = prepare_graph(report["graphs"]["compiled"], report)
    rects = {k: (x, y, w, h) for k, x, y, w, h, *_ in js["boxes"]}
    assert len(rects) > 50 and len(js["edges"]) > 100
    through = edges_through(pg, rects, [(u, v, pts) for u, v, _n, _up, pts in js["edges"]])
    assert not through, through
