"""A loop in the picture (issue 43 item 4), in Chromium: a 6-iteration ``lax.scan`` whose body
takes a heavy ``lax.cond`` branch on iteration 3, compiled with ``%%compile --profile 3
--grad`` in JupyterLab and shown again from its saved page (``c.save_html``).

The Graph and Compiled tabs draw the loop as one group ``scan × 6 · line 7`` with a strip of
six bars (iteration 3 the tallest; its hover text names the iteration, its time and its
kernels), inside the visible canvas; the Gradient tab draws the backward scan beside its
forward, in a column of its own to the right, level with it.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from .helpers import screenshot
from .test_ui_backprop import BOXES, IDLE, RECT, RUN_ALL, _inside

pytestmark = pytest.mark.ui

SETUP = """import json
import jax, jax.numpy as jnp
from jax import lax
import nbcompile
x = jnp.ones((128, 128)) * 0.01
w = jnp.eye(128) * 0.5"""
# line 7 of the cell (the %%compile line is line 1) calls lax.scan
CELL = """%%compile --profile 3 --grad
def f(x, w):
    def heavy(c):
        return jnp.tanh(c @ w @ w @ w @ w @ w @ w)
    def body(c, i):
        return lax.cond(i == 3, heavy, lambda c: c + 1.0, c), None
    return lax.scan(body, x, jnp.arange(6))[0].sum()
f(x, w)"""
SAVE = """c = nbcompile.last()
c.save_html("loops.html")
json.dump({"label": c.loops[0].label, "iterations": c.profile.loops[0].iterations},
          open("loops.json", "w"))"""
LABEL = "scan × 6 · line 7"
STRIP = """(canvas) => [...canvas.querySelectorAll('[data-testid="nbc-loop-bar"]')].map((e) => {
  const r = e.getBoundingClientRect();
  return {k: Number(e.getAttribute('data-iteration')), s: Number(e.getAttribute('data-seconds')),
          title: e.querySelector('title').textContent, x: r.x, y: r.y, w: r.width, h: r.height};
})"""


def _notebook(path: Path) -> None:
    cells = ["%load_ext nbcompile", SETUP, CELL, SAVE]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in cells])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)


def _check_loop(page, view, tab: str, iterations: list[float], shot: str) -> None:
    view.get_by_test_id(f"nbc-tab-{tab}").click()
    canvas = view.get_by_test_id(f"nbc-canvas-{tab}")
    canvas.locator('[data-kind="group"]').first.wait_for()
    canvas.screenshot(path=str(screenshot(page, f"{shot}_{tab}.png")))
    boxes = canvas.evaluate(BOXES)
    rect = canvas.evaluate(RECT)
    loops = [b for b in boxes if b["kind"] == "group" and b["name"].startswith(LABEL)]
    assert loops and all(_inside(b, rect) for b in loops), (loops, rect)
    bars = sorted(canvas.evaluate(STRIP), key=lambda b: b["k"])
    assert [b["k"] for b in bars] == list(range(6)), bars
    assert [b["s"] for b in bars] == pytest.approx(iterations)
    assert all(_inside(b, rect) and b["w"] > 0 and b["h"] > 0 for b in bars), (bars, rect)
    tallest = max(bars, key=lambda b: b["h"])
    assert tallest["k"] == 3 and tallest["h"] >= 2 * sorted(b["h"] for b in bars)[2]
    assert "iteration 3 of 6" in tallest["title"] and "kernels:" in tallest["title"]


def _check_gradient(page, view, shot: str) -> None:
    view.get_by_test_id("nbc-tab-gradient").click()
    grad = view.get_by_test_id("nbc-canvas-gradient")
    grad.locator('[data-kind="group"]').first.wait_for()
    grad.screenshot(path=str(screenshot(page, f"{shot}_gradient.png")))
    groups = {b["name"]: b for b in grad.evaluate(BOXES) if b["kind"] == "group"}
    fwd, bwd = groups[LABEL], groups[f"{LABEL} (backward)"]
    assert bwd["x"] >= fwd["x"] + fwd["w"], (fwd, bwd)  # its own column, to the right
    assert abs(bwd["y"] - fwd["y"]) < max(fwd["h"], bwd["h"]) / 2, (fwd, bwd)
    assert (fwd["phase"], bwd["phase"]) == ("forward", "backward")
    rect = grad.evaluate(RECT)
    assert _inside(fwd, rect) and _inside(bwd, rect), (fwd, bwd, rect)


def _check(page, view, iterations: list[float], shot: str) -> None:
    for tab in ("graph", "compiled"):
        _check_loop(page, view, tab, iterations, shot)
    _check_gradient(page, view, shot)


def test_loop_group_and_bar_strip_in_jupyterlab_and_the_saved_page(ui_page, lab_session):
    page, lab = ui_page, lab_session
    _notebook(lab["root"] / "loops.ipynb")
    page.goto(f"{lab['url']}/lab/tree/loops.ipynb?reset")
    page.wait_for_selector(".jp-NotebookPanel")
    page.wait_for_function(IDLE, timeout=60_000)
    assert page.evaluate(RUN_ALL) is True
    saved = json.loads((lab["root"] / "loops.json").read_text())
    assert saved["label"] == LABEL and len(saved["iterations"]) == 6
    view = page.locator(".jp-OutputArea-output .nbc-root").first
    view.scroll_into_view_if_needed()
    _check(page, view, saved["iterations"], "loops_lab")

    page.goto((lab["root"] / "loops.html").as_uri())
    page.locator("[data-first-paint-ms]").wait_for()
    _check(page, page.locator(".nbc-root").first, saved["iterations"], "loops_saved")
