"""The whiteboard picture at first paint (issue 42; SPEC §8.1), in Chromium: four models as a
user writes them (a plain-JAX MLP, a Flax NNX transformer, Equinox's CNN, a plain-JAX convnet:
whiteboard_models.py), each compiled by a ``%%compile --grad`` cell in JupyterLab, then the same
views in their saved pages (``c.save_html``).

For each model, in the widget and in the saved page, at 1400x900:
- the first Graph and Compiled views draw at most 25 boxes, every label 8 px or more on screen,
  the drawing as wide as the canvas at most; the Graph view names the user's calls or modules
  as groups (``layer#1…#10``, ``blocks_0…3``, ``layers_k``, ``layers_2 (relu)``, ``conv#1``,
  ``conv#2``), a group's subtitle its output's shape and parameters (``(16, 32) · 1.06K
  params``);
- the Compiled tab draws the train step (forward and backward): opened with ⊞, every kernel box
  lies inside the frames of the groups it is drawn in (``data-in``), and those are the calls
  and modules its ops came from (XLA's op metadata, saved by the notebook) — labels still 8 px
  or more.
Read from the view's test hooks: ``data-kind``, ``data-name``, ``data-kernel``, ``data-in``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest

from .helpers import screenshot
from .whiteboard_models import CALLS, MODELS, SUBTITLES, place_error

pytestmark = pytest.mark.ui

IDLE = r"""() => [...document.querySelectorAll('.jp-StatusBar-TextItem')]
  .some((e) => /^(?!No Kernel).+ \| Idle$/.test(e.textContent.trim()))"""
RUN_ALL = """() => Promise.race([
  window.jupyterapp.commands.execute('notebook:run-all-cells'),
  new Promise((_, reject) => setTimeout(() => reject(new Error('run-all timed out')), 240000))])"""
#: what a person sees of one canvas: its rect, every drawn box, every frame, the text sizes
SEEN = """(canvas) => {
  const rect = (e) => { const r = e.getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; };
  const boxes = [...canvas.querySelectorAll('.nbc-unit')].map((e) => ({
    kind: e.getAttribute('data-kind'), name: e.getAttribute('data-name'),
    kernel: e.getAttribute('data-kernel'), inside: e.getAttribute('data-in'), rect: rect(e)}));
  const frames = [...canvas.querySelectorAll('.nbc-cluster')].map((c) => ({
    name: c.querySelector('[data-kind]').getAttribute('data-name'), rect: rect(c)}));
  const c = rect(canvas);
  const sizes = [...canvas.querySelectorAll('text')].filter((t) => {
    const r = t.getBoundingClientRect();
    return r.bottom > c[1] && r.top < c[1] + c[3] && r.right > c[0] && r.left < c[0] + c[2];
  }).map((t) => t.getScreenCTM().a * parseFloat(getComputedStyle(t).fontSize));
  return {canvas: c, boxes, frames, minFont: sizes.length ? Math.min(...sizes) : 0};
}"""
SAVE = """import json
c = nbcompile.last()
c.save_html("wb_{name}.html")
_r = c.report()
json.dump({{
    "fusions": {{f["name"]: [f.get("functions") or [], f.get("modules") or []]
                for f in _r["gradient_fusions"]}},
    "scopes": {{n["label"]: n.get("scopes") or [] for n in _r["graphs"]["gradient_compiled"]["nodes"]}},
    "library": sorted({{g["label"].removesuffix(" (backward)")
                       for w in ("traced", "gradient") for g in _r["graphs"][w].get("groups") or []
                       if g.get("call") == "library"}}),
}}, open("wb_{name}.json", "w"))"""


def _notebook(path: Path) -> None:
    cells = ["%load_ext nbcompile\nimport nbcompile"]
    for name, (model, compile_cell) in MODELS.items():
        cells += [*model, compile_cell, SAVE.format(name=name)]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nbformat.write(nb, path)


def _within(inner: list[float], outer: list[float], slack: float = 1.0) -> bool:
    x, y, w, h = inner
    X, Y, W, H = outer
    return x >= X - slack and y >= Y - slack and x + w <= X + W + slack and y + h <= Y + H + slack


def _first_view(view: Any, tab: str, name: str) -> dict[str, Any]:
    view.get_by_test_id(f"nbc-tab-{tab}").click()
    canvas = view.get_by_test_id(f"nbc-canvas-{tab}")
    canvas.locator(".nbc-unit").first.wait_for()
    seen = canvas.evaluate(SEEN)
    boxes = seen["boxes"]
    assert 1 <= len(boxes) <= 25, (name, tab, [b["name"] for b in boxes])
    assert seen["minFont"] >= 8 - 1e-6, (name, tab, seen["minFont"])
    # as wide as the canvas at most, the first row in sight
    x, _y, w, _h = seen["canvas"]
    assert all(b["rect"][0] >= x - 1 and b["rect"][0] + b["rect"][2] <= x + w + 1 for b in boxes)
    assert any(_within(b["rect"], seen["canvas"]) for b in boxes)
    return seen


def _check_view(page: Any, view: Any, name: str, truth: dict[str, Any], shot: str) -> None:
    seen = _first_view(view, "graph", name)
    groups = {b["name"] for b in seen["boxes"] if b["kind"] == "group"}
    assert set(CALLS[name]) <= groups, (name, sorted(groups))
    group, subtitle = SUBTITLES[name]
    box = view.get_by_test_id("nbc-canvas-graph").locator(
        f'.nbc-unit[data-kind="group"][data-name="{group}"]'
    )
    assert subtitle in box.first.text_content(), (name, box.first.text_content())
    _first_view(view, "compiled", name)
    assert view.get_by_test_id("nbc-show-step").get_attribute("aria-checked") == "true"
    view.get_by_test_id("nbc-canvas-compiled").screenshot(
        path=str(screenshot(page, f"{shot}_{name}_compiled.png"))
    )

    # every kernel inside the calls and modules it came from, all groups open
    view.get_by_test_id("nbc-expand-all").click()
    canvas = view.get_by_test_id("nbc-canvas-compiled")
    page.wait_for_timeout(300)
    seen = canvas.evaluate(SEEN)
    assert seen["minFont"] >= 8 - 1e-6, (name, seen["minFont"])
    library = set(truth["library"])
    kernels = [b for b in seen["boxes"] if b["kernel"]]
    assert len(kernels) >= 10, (name, len(kernels))
    placed = 0
    for b in kernels:
        inside = [g for g in (b["inside"] or "").split("/") if g]
        for g in inside:  # drawn within a frame of each group it is said to be in
            assert any(f["name"] == g and _within(b["rect"], f["rect"]) for f in seen["frames"]), (
                name,
                b,
                g,
            )
        functions, modules = truth["fusions"].get(b["kernel"], [[], []])
        if not functions and not modules:
            continue  # no metadata of the user's (an iota, a broadcast): placed by its neighbour
        top = "" in truth["scopes"].get(b["kernel"], [])
        error = place_error(b["kernel"], inside, functions, modules, top, library)
        assert error is None, (name, error)
        placed += int(bool(inside))
    assert placed >= 4, (name, placed)


def test_whiteboard_pictures_in_jupyterlab_and_the_saved_pages(ui_page, lab_session):
    page, lab = ui_page, lab_session
    page.set_viewport_size({"width": 1400, "height": 900})
    _notebook(lab["root"] / "whiteboard.ipynb")
    page.goto(f"{lab['url']}/lab/tree/whiteboard.ipynb?reset")
    page.wait_for_selector(".jp-NotebookPanel")
    page.wait_for_function(IDLE, timeout=60_000)
    assert page.evaluate(RUN_ALL) is True
    truth = {name: json.loads((lab["root"] / f"wb_{name}.json").read_text()) for name in MODELS}
    views = page.locator(".jp-OutputArea-output .nbc-root")
    views.nth(len(MODELS) - 1).locator("[data-testid=nbc-canvas-graph] .nbc-unit").first.wait_for()
    for i, name in enumerate(MODELS):
        view = views.nth(i)
        view.scroll_into_view_if_needed()
        _check_view(page, view, name, truth[name], "whiteboard_lab")

    # the same pictures in each saved page, offline
    for name in MODELS:
        page.goto((lab["root"] / f"wb_{name}.html").as_uri())
        page.locator("[data-first-paint-ms]").wait_for()
        _check_view(page, page.locator(".nbc-root").first, name, truth[name], "whiteboard_saved")
