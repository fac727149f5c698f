"""The view in a real browser: JupyterLab with a live kernel, a saved notebook, the static page."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest

from .helpers import report_fixtures, screenshot

pytestmark = pytest.mark.ui

IDLE = r"""() => [...document.querySelectorAll('.jp-StatusBar-TextItem')]
  .some((e) => /^(?!No Kernel).+ \| Idle$/.test(e.textContent.trim()))"""
RUN_ALL = """() => Promise.race([
  window.jupyterapp.commands.execute('notebook:run-all-cells'),
  new Promise((_, reject) => setTimeout(() => reject(new Error('run-all timed out')), 90000))])"""

REAL_CELL = """import jax.numpy as jnp
import nbcompile
def predict(params, x):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]
params = {"w1": jnp.ones((16, 32)), "b1": jnp.zeros(32), "w2": jnp.ones((32, 4)), "b2": jnp.zeros(4)}
real = nbcompile.compile(predict, params, jnp.ones((8, 16))).report()
json.dump(real, open("real.json", "w"))
CompilationView(real)"""


def _notebook(path: Path, *sources: str) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)


def _open(page, lab: dict, name: str) -> None:
    page.goto(f"{lab['url']}/lab/tree/{name}?reset")
    page.wait_for_selector(".jp-NotebookPanel")
    page.wait_for_function(IDLE, timeout=60_000)


def test_live_view_in_jupyterlab(ui_page, lab_session):
    page, lab = ui_page, lab_session
    small = report_fixtures().small_report()
    (lab["root"] / "small.json").write_text(json.dumps(small))
    _notebook(
        lab["root"] / "live.ipynb",
        "import json\nfrom nbcompile.widgets import CompilationView\n"
        "view = CompilationView(json.load(open('small.json')))\nview",
        REAL_CELL,
    )
    _open(page, lab, "live.ipynb")
    assert page.evaluate(RUN_ALL) is True
    views = page.locator(".jp-OutputArea-output .nbc-root")
    views.nth(1).locator("[data-testid=nbc-tab-graph]").wait_for()
    # drawn by the widget (its gzip'd _esm loaded by anywidget: the view is the widget's own
    # element), not by the text/html fallback's script (which mounts inside [data-nbc-root])
    assert page.locator(".jp-OutputArea-output > .lm-Widget.nbc-root").count() == 2
    assert page.locator(".jp-OutputArea-output [data-nbc-root]").count() == 0
    view = views.nth(0)

    # Click a fusion in the Compiled tab: its ops in the details, its lines in the Source tab.
    fusion = small["fusions"][0]
    view.get_by_test_id("nbc-tab-compiled").click()
    view.locator(f'[data-testid=nbc-fusion][data-fusion="{fusion["id"]}"]').click()
    ops = view.get_by_test_id("nbc-details").get_by_test_id("nbc-fusion-ops")
    for op in fusion["ops"]:
        assert op in ops.inner_text()
    view.get_by_test_id("nbc-tab-source").click()
    for n in range(1, len(small["source"]["lines"]) + 1):
        expected = "true" if n in fusion["lines"] else "false"
        assert view.get_by_test_id(f"nbc-line-{n}").get_attribute("data-highlighted") == expected, n

    # And back: clicking a line highlights its ops in the traced graph.
    view.get_by_test_id("nbc-line-4").click()
    view.get_by_test_id("nbc-tab-graph").click()
    line4 = {n["id"] for n in small["graphs"]["traced"]["nodes"] if n["line"] == 4}
    canvas = view.get_by_test_id("nbc-canvas-graph")
    lit = canvas.locator('[data-testid=nbc-node][data-highlighted="true"]')
    assert {lit.nth(i).get_attribute("data-id") for i in range(lit.count())} == line4

    # Search with a visible match count.
    view.get_by_test_id("nbc-search").fill("dot_general")
    expected = sum(n["op"] == "dot_general" for n in small["graphs"]["traced"]["nodes"])
    assert view.get_by_test_id("nbc-match-count").inner_text() == f"{expected} matches"
    assert canvas.locator("[data-testid=nbc-node].nbc-match").count() == expected

    # Collapse and expand a group, by mouse then by keyboard.
    drawn = sum(n["kind"] not in ("param",) for n in small["graphs"]["traced"]["nodes"])
    assert canvas.get_by_test_id("nbc-node").count() == drawn
    gid = small["graphs"]["traced"]["groups"][0]["id"]
    view.locator(f'[data-testid=nbc-group][data-group="{gid}"][aria-expanded="true"]').click()
    collapsed = view.locator(f'[data-testid=nbc-group][data-group="{gid}"][aria-expanded="false"]')
    collapsed.wait_for()
    in_group = sum(
        n["group"] == gid for n in small["graphs"]["traced"]["nodes"] if n["kind"] != "param"
    )
    assert canvas.get_by_test_id("nbc-node").count() == drawn - in_group
    collapsed.focus()
    page.keyboard.press("Enter")
    view.locator(f'[data-testid=nbc-group][data-group="{gid}"][aria-expanded="true"]').wait_for()
    assert canvas.get_by_test_id("nbc-node").count() == drawn
    screenshot(page, "live_view.png")

    # The real report (built by nbcompile in the kernel): a fusion leads to its own lines.
    real = json.loads((lab["root"] / "real.json").read_text())
    rv = views.nth(1)
    rv.get_by_test_id("nbc-tab-compiled").click()
    first = rv.get_by_test_id("nbc-fusion").first
    fid = first.get_attribute("data-fusion")
    first.click()
    lines = next(f["lines"] for f in real["fusions"] if f["id"] == fid)
    assert lines, "the real fusion maps to no cell line"
    rv.get_by_test_id("nbc-tab-source").click()
    for n in lines:
        assert rv.get_by_test_id(f"nbc-line-{n}").get_attribute("data-highlighted") == "true"
    rv.scroll_into_view_if_needed()
    screenshot(page, "live_real_view.png")


def _static_page(tmp_path: Path, report: dict[str, Any]) -> str:
    from nbcompile.widgets import static_page

    path = tmp_path / "view.html"
    path.write_text(static_page(report), encoding="utf-8")
    return path.as_uri()


def test_static_html_offline(ui_page, tmp_path):
    page = ui_page
    small = report_fixtures().small_report()
    page.goto(_static_page(tmp_path, small))
    page.locator("[data-first-paint-ms]").wait_for()
    assert page.get_by_test_id("nbc-node").first.is_visible()
    assert page.locator("[data-nbc-fallback]").is_hidden()  # replaced by the live view
    page.get_by_test_id("nbc-search").fill("tanh")
    assert page.get_by_test_id("nbc-match-count").inner_text() == "1 match"
    page.get_by_test_id("nbc-tab-stats").click()
    assert "fusions" in page.get_by_test_id("nbc-stats-summary").inner_text()
    assert not page.page_errors, page.page_errors


def test_gzipped_front_end_two_outputs_and_no_decompression(ui_page, tmp_path):
    """The front end ships gzip'd (nbcompile/widgets/_shipped.py): the first output's loader
    inflates it; a later output (no renderer of its own) mounts too; a browser without
    DecompressionStream keeps both static pictures, without an error."""
    from nbcompile.report.html import render_html
    from nbcompile.widgets import renderer_script

    page = ui_page
    small = report_fixtures().small_report()
    path = tmp_path / "two.html"
    first, later = render_html(small, renderer=renderer_script()), render_html(small)
    path.write_text(f"<!DOCTYPE html><html><body>{first}{later}</body></html>", encoding="utf-8")
    page.goto(path.as_uri())
    page.wait_for_function("document.querySelectorAll('[data-first-paint-ms]').length == 2")
    assert page.locator("[data-nbc-mounted]").count() == 2
    assert page.locator("[data-nbc-fallback]").first.is_hidden()
    assert page.locator("[data-nbc-fallback]").last.is_hidden()
    assert page.get_by_test_id("nbc-node").first.is_visible()
    assert not page.page_errors, page.page_errors

    old = page.context.new_page()
    errors: list[str] = []
    old.on("pageerror", lambda e: errors.append(str(e)))
    old.add_init_script("delete window.DecompressionStream;")
    old.goto(path.as_uri())
    old.wait_for_load_state("load")
    old.wait_for_timeout(500)
    assert old.locator("[data-nbc-mounted]").count() == 0
    pictures = old.locator('[data-nbc-fallback] img[src^="data:image/svg+xml;base64,"]')
    assert pictures.count() >= 2 and pictures.first.is_visible()
    assert not errors, errors
    old.close()


def test_first_paint_of_the_big_train_step(ui_page, tmp_path):
    page = ui_page
    page.goto(_static_page(tmp_path, report_fixtures().big_report()))
    root = page.locator("[data-first-paint-ms]")
    root.wait_for()
    render_ms = float(root.get_attribute("data-first-paint-ms"))
    since_navigation_ms = page.evaluate("() => performance.now()")
    boxes = page.locator("[data-testid=nbc-canvas-graph] [data-key]").count()
    print(
        f"\nfirst paint of the 12-layer train step: render {render_ms:.0f} ms, "
        f"page {since_navigation_ms:.0f} ms since navigation, {boxes} boxes"
    )
    assert render_ms < 5000
    assert 5 <= boxes <= 400  # collapsed to groups, within the node budget
    # the whiteboard picture: the forward loss opened to its twelve layers, its backward twin
    # one box beside it
    layers = page.locator('[data-testid=nbc-canvas-graph] [data-kind="group"][data-name^="layer_"]')
    assert layers.count() == 12
    # Expanding a layer stays within the budget and is drawn.
    layer = page.locator('[data-testid=nbc-group][aria-expanded="false"]').first
    layer.click()
    assert page.locator("[data-testid=nbc-canvas-graph] [data-key]").count() > boxes
    screenshot(page, "big_static.png")
    assert not page.page_errors, page.page_errors
