"""The picture a person would draw (SPEC §8.1), in Chromium: a 10-layer plain-JAX train step
(``block(p, x)`` defined in an earlier cell, called from a loop in the ``%%compile --grad``
cell) in JupyterLab and in its saved page (``c.save_html``).

The first Graph view draws the ten calls (at most 25 boxes, each inside the visible canvas);
the Gradient tab is backprop as a textbook draws it: every ``block#k (backward)`` group faces
its ``block#k`` (vertical offset under half the spacing between blocks) in a column of its own
to the right, the residual edges between them carry ``c.gradient.pairs``' bytes. Checked on the
test hooks every drawn box carries (data-kind, data-name, data-phase).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import nbformat
import pytest

from .helpers import screenshot

pytestmark = pytest.mark.ui

IDLE = r"""() => [...document.querySelectorAll('.jp-StatusBar-TextItem')]
  .some((e) => /^(?!No Kernel).+ \| Idle$/.test(e.textContent.trim()))"""
RUN_ALL = """() => Promise.race([
  window.jupyterapp.commands.execute('notebook:run-all-cells'),
  new Promise((_, reject) => setTimeout(() => reject(new Error('run-all timed out')), 150000))])"""
#: every drawn box of a canvas, where the page draws it
BOXES = """(canvas) => [...canvas.querySelectorAll('[data-kind]')].map((e) => {
  const r = e.getBoundingClientRect();
  return {kind: e.getAttribute('data-kind'), name: e.getAttribute('data-name'),
          phase: e.getAttribute('data-phase'), x: r.x, y: r.y, w: r.width, h: r.height};
})"""
RECT = "(e) => { const r = e.getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; }"

BLOCK = """import json
import jax, jax.numpy as jnp, numpy as np
import nbcompile

def block(p, x):
    h = jax.nn.gelu(x @ p["w1"])
    v = h.var(axis=-1, keepdims=True)
    return x + (h / jnp.sqrt(v + 1.0)) @ p["w2"]

rng = np.random.default_rng(0)
layers = [{"w1": jnp.asarray(rng.normal(size=(16, 32)) * 0.1, jnp.float32),
           "w2": jnp.asarray(rng.normal(size=(32, 16)) * 0.1, jnp.float32)} for _ in range(10)]
xs = jnp.asarray(rng.normal(size=(8, 16)), jnp.float32)
ys = jnp.asarray(rng.normal(size=(8, 16)), jnp.float32)"""
CELL = """%%compile --grad
def loss(params, x, y):
    for p in params:
        x = block(p, x)
    return jnp.mean((x - y) ** 2)
loss(layers, xs, ys)"""
SAVE = """c = nbcompile.last()
c.save_html("backprop.html")
json.dump([list(p) for p in c.gradient.pairs], open("pairs.json", "w"))"""
BLOCKS = [f"block#{k}" for k in range(1, 11)]


def _notebook(path: Path) -> None:
    cells = ["%load_ext nbcompile", BLOCK, CELL, SAVE]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in cells])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)


def _inside(box: dict[str, Any], canvas: list[float]) -> bool:
    x, y, w, h = canvas
    return (
        box["x"] >= x - 1
        and box["y"] >= y - 1
        and box["x"] + box["w"] <= x + w + 1
        and box["y"] + box["h"] <= y + h + 1
    )


def _check_picture(page, view, pairs: list[list[Any]], shot: str) -> None:
    # the first Graph view: the ten calls, at most 25 boxes, all where a person sees them
    graph = view.get_by_test_id("nbc-canvas-graph")
    graph.locator("[data-kind]").first.wait_for()
    boxes = graph.evaluate(BOXES)
    assert 10 <= len(boxes) <= 25, [b["name"] for b in boxes]
    assert {b["kind"] for b in boxes} <= {"group", "op", "fusion", "output", "input"}
    calls = sorted((b["y"], b["name"]) for b in boxes if b["name"].startswith("block#"))
    assert [name for _, name in calls] == BLOCKS  # one box per call, in program order
    rect = graph.evaluate(RECT)
    assert all(_inside(b, rect) for b in boxes), (rect, boxes)
    graph.screenshot(path=str(screenshot(page, f"{shot}_graph.png")))

    # the Gradient tab: the forward pass down one column, the backward pass up the other
    view.get_by_test_id("nbc-tab-gradient").click()
    grad = view.get_by_test_id("nbc-canvas-gradient")
    grad.locator('[data-kind="group"]').first.wait_for()
    boxes = grad.evaluate(BOXES)
    groups = {b["name"]: b for b in boxes if b["kind"] == "group"}
    ys = [groups[name]["y"] for name in BLOCKS]
    assert ys == sorted(ys)  # forward: down
    spacing = min(b - a for a, b in itertools.pairwise(ys))
    assert spacing > 0
    rect = grad.evaluate(RECT)
    for name in BLOCKS:
        fwd, bwd = groups[name], groups[f"{name} (backward)"]
        assert abs(bwd["y"] - fwd["y"]) < spacing / 2, (name, fwd, bwd, spacing)
        assert bwd["x"] >= fwd["x"] + fwd["w"], (name, fwd, bwd)  # its own column, to the right
        assert (fwd["phase"], bwd["phase"]) == ("forward", "backward")
        assert _inside(fwd, rect) and _inside(bwd, rect), (name, rect)
    right = min(groups[f"{b} (backward)"]["x"] for b in BLOCKS)
    assert max(groups[b]["x"] + groups[b]["w"] for b in BLOCKS) <= right
    # the residuals: an edge from each forward block to its backward block, with its bytes
    drawn = grad.locator(".nbc-edge-residual").evaluate_all(
        "(es) => es.map((e) => Number(e.getAttribute('data-bytes')))"
    )
    saved = {f: n for f, _b, n in pairs}
    for name in BLOCKS:
        assert saved[name] > 0 and saved[name] in drawn
    grad.screenshot(path=str(screenshot(page, f"{shot}_gradient.png")))
    _check_opened_layer(page, grad, shot)


#: the boxes a frame of the canvas holds (its cluster's rect), by the frame's name
FRAME_BOXES = """(canvas, name) => {
  const rect = (e) => { const r = e.getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; };
  const head = [...canvas.querySelectorAll('.nbc-cluster [data-kind="group"]')]
    .find((e) => e.getAttribute('data-name') === name);
  if (!head) return null;
  const frame = rect(head.parentElement);
  const inside = (r) => r[0] >= frame[0] - 1 && r[1] >= frame[1] + 10 && r[0] + r[2] <= frame[0] + frame[2] + 1
    && r[1] + r[3] <= frame[1] + frame[3] + 1;
  return {frame, boxes: [...canvas.querySelectorAll('.nbc-unit')].map((e) => ({
    name: e.getAttribute('data-name'), kind: e.getAttribute('data-kind'), phase: e.getAttribute('data-phase'),
    in: e.getAttribute('data-in'), rect: rect(e)})).filter((b) => inside(b.rect))};
}"""


def _check_opened_layer(page, grad, shot: str) -> None:
    """Open ``block#3`` (its twin ``block#3 (backward)`` opens with it): side by side, fitted
    into the canvas together, the backward ops a column
    running up (not a strip), each in a row of the forward ops; no box outside the canvas's
    width; the loss tail (ops outside any call) faces its backward ops too."""
    grad.locator('[data-kind="group"][data-name="block#3"]').first.click()  # opens its twin too
    page.wait_for_timeout(300)
    fwd = grad.evaluate(FRAME_BOXES, "block#3")
    back = grad.evaluate(FRAME_BOXES, "block#3 (backward)")
    assert fwd and back, (fwd, back)
    assert back["frame"][0] >= fwd["frame"][0] + fwd["frame"][2] - 1  # to its right
    assert abs(back["frame"][1] - fwd["frame"][1]) < 2  # level
    brows = sorted({round(b["rect"][1] + b["rect"][3] / 2) for b in back["boxes"]})
    assert len(back["boxes"]) >= 4 and len(brows) >= 3, brows  # a column, not a strip
    band = (
        min(b["rect"][1] for b in fwd["boxes"]),
        max(b["rect"][1] + b["rect"][3] for b in fwd["boxes"]),
    )
    assert all(band[0] - 2 <= y <= band[1] + 2 for y in brows), (band, brows)
    assert all(
        b["phase"] in ("backward", "mixed", None) for b in back["boxes"] if b["kind"] != "output"
    )
    grad.screenshot(path=str(screenshot(page, f"{shot}_gradient_open.png")))
    # the loss tail: the top level's loose forward ops and their backward ops, two columns
    boxes = grad.evaluate(BOXES)
    top = [b for b in boxes if b["kind"] == "op"]
    fwd_x = [b["x"] + b["w"] for b in top if b["phase"] == "forward"]
    back_x = [b["x"] for b in top if b["phase"] == "backward"]
    assert fwd_x and back_x and max(fwd_x) <= min(back_x) + 1, (fwd_x, back_x)


def test_backprop_picture_in_jupyterlab_and_the_saved_page(ui_page, lab_session):
    page, lab = ui_page, lab_session
    _notebook(lab["root"] / "backprop.ipynb")
    page.goto(f"{lab['url']}/lab/tree/backprop.ipynb?reset")
    page.wait_for_selector(".jp-NotebookPanel")
    page.wait_for_function(IDLE, timeout=60_000)
    assert page.evaluate(RUN_ALL) is True
    pairs = json.loads((lab["root"] / "pairs.json").read_text())
    assert [p[0] for p in pairs if p[0] in BLOCKS] == BLOCKS
    view = page.locator(".jp-OutputArea-output .nbc-root").first
    view.scroll_into_view_if_needed()
    _check_picture(page, view, pairs, "backprop_lab")

    # the same picture in the saved page, offline
    page.goto((lab["root"] / "backprop.html").as_uri())
    page.locator("[data-first-paint-ms]").wait_for()
    _check_picture(page, page.locator(".nbc-root").first, pairs, "backprop_saved")
