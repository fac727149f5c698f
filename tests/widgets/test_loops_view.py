"""Loops in the report and the picture (issue 43 item 4): a loop's body group is named as the
loop (``scan × 6 · line 6``) in the traced and compiled graphs, the gradient's backward scan
is named so that it faces its forward, and a collapsed loop with measured iterations keeps a
line for its strip, the same in the widget's layout and the static picture's."""

from __future__ import annotations

import jax.numpy as jnp
import pytest
from jax import lax

import nbcompile

from .test_layout_parity import NODE, _check

pytestmark = pytest.mark.profiler


def layer(h, w):
    return jnp.tanh(h @ w)


def scan_loss(ws, x):
    def body(h, w):
        return layer(h, w), None

    h, _ = lax.scan(body, x, ws)
    return (h**2).sum()


@pytest.fixture(scope="module")
def profiled():
    c = nbcompile.compile(scan_loss, jnp.ones((6, 64, 64)) * 0.01, jnp.ones((8, 64)), grad=0)
    c.run_profile(calls=3)
    return c


def test_loop_groups_are_named_as_the_loop(profiled):
    report = profiled.report()
    (loop,) = report["loops"]
    traced = {g["id"]: g for g in report["graphs"]["traced"]["groups"]}
    assert traced[loop["body_group"]]["label"] == loop["label"]
    assert loop["label"].startswith("scan × 6 · ")
    compiled = {g["id"]: g for g in report["graphs"]["compiled"]["groups"]}
    body, cond = loop["compiled_groups"]
    assert compiled[body]["label"] == f"{loop['label']} · {loop['whiles'][0]}"
    assert "condition" in compiled[cond]["label"]


def test_the_backward_scan_is_named_to_face_its_forward(profiled):
    report = profiled.report()
    fwd, bwd = report["gradient_loops"]
    groups = {g["id"]: g for g in report["graphs"]["gradient"]["groups"]}
    assert groups[bwd["body_group"]]["label"] == groups[fwd["body_group"]]["label"] + " (backward)"
    # siblings: the facing columns pair a group with its "(backward)" namesake in one box
    assert groups[bwd["body_group"]]["parent"] == groups[fwd["body_group"]]["parent"]


@pytest.mark.skipif(NODE is None, reason="Node.js runs the front end's layout")
def test_a_profiled_loop_lays_out_the_same_in_both_pictures(profiled, tmp_path):
    report = profiled.report()
    assert report["extras"]["profile"]["loops"][0]["iterations"]
    _check(report, tmp_path, limit=1)  # loop groups collapsed: their strip's line reserved
    _check(report, tmp_path)  # open


def test_a_collapsed_measured_loop_reserves_its_strip_line(profiled):
    from nbcompile.report.graphmodel import prepare_graph
    from nbcompile.report.scene import build_scene

    report = profiled.report()
    pg = prepare_graph(report["graphs"]["traced"], report)
    loops = [b for b in build_scene(pg, set()).boxes.values() if _is_loop(b)]
    assert len(loops) == 1 and loops[0].lines[-1] == ""
    report["extras"].pop("profile")
    pg = prepare_graph(report["graphs"]["traced"], report)
    loops = [b for b in build_scene(pg, set()).boxes.values() if _is_loop(b)]
    assert len(loops) == 1 and loops[0].lines[-1] != ""


def _is_loop(box) -> bool:
    return box.children is None and box.group is not None and box.lines[0].startswith("▸ scan × 6")
