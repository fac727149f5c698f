"""The Passes tab and the kernel code panel in a real browser (js/passes.js): a ``%%compile
--passes`` cell in JupyterLab steps through XLA's passes by button and arrow key and opens a
kernel's code coloured by its source line; the static fallback shows the pass chart."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from .helpers import screenshot

pytestmark = pytest.mark.ui

IDLE = r"""() => [...document.querySelectorAll('.jp-StatusBar-TextItem')]
  .some((e) => /^(?!No Kernel).+ \| Idle$/.test(e.textContent.trim()))"""
RUN_ALL = """() => Promise.race([
  window.jupyterapp.commands.execute('notebook:run-all-cells'),
  new Promise((_, reject) => setTimeout(() => reject(new Error('run-all timed out')), 150000))])"""

SETUP = """import json
import jax.numpy as jnp
import nbcompile
w = jnp.ones((64, 64)) * 0.01; x = jnp.ones((32, 64))"""
# line 5 of the cell (the %%compile line is line 1) is the loop: its ops make one kernel
CELL = """%%compile --passes
def step(w, x):
    h = x @ w
    for _ in range(24):
        h = jnp.tanh(h) * 0.5 + h
    return h
step(w, x)"""
SAVE = "json.dump(nbcompile.last().report(), open('passes.json', 'w'))"
#: js/passes.js LOCATION_COLOURS[0] as the browser computes it
FIRST_COLOUR = "rgb(31, 119, 180)"


def _notebook(path: Path) -> None:
    cells = ["%load_ext nbcompile", SETUP, CELL, SAVE]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in cells])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)


def _selected(view) -> list[str]:
    chart = view.get_by_test_id("nbc-passes-chart")
    return chart.locator('g[data-kind="step"][data-selected="true"]').evaluate_all(
        "(gs) => gs.map((g) => g.getAttribute('data-name'))"
    )


def test_passes_tab_and_kernel_code_in_jupyterlab(ui_page, lab_session):
    page, lab = ui_page, lab_session
    _notebook(lab["root"] / "passes.ipynb")
    page.goto(f"{lab['url']}/lab/tree/passes.ipynb?reset")
    page.wait_for_selector(".jp-NotebookPanel")
    page.wait_for_function(IDLE, timeout=60_000)
    assert page.evaluate(RUN_ALL) is True
    report = json.loads((lab["root"] / "passes.json").read_text())
    steps = report["extras"]["passes"]["steps"]
    view = page.locator(".jp-OutputArea-output .nbc-root").first
    view.get_by_test_id("nbc-tab-passes").click()

    # one chart column per step shipped, exactly one selected; the buttons and keys step
    chart = view.get_by_test_id("nbc-passes-chart")
    names = chart.locator('g[data-kind="step"]').evaluate_all(
        "(gs) => gs.map((g) => g.getAttribute('data-name'))"
    )
    assert names == [f"{s['index']} {s['pipeline']}/{s['name']}" for s in steps]
    label = view.get_by_test_id("nbc-pass-label")
    first = _selected(view)
    assert len(first) == 1
    at = names.index(first[0])
    view.get_by_test_id("nbc-pass-next").click()
    assert _selected(view) == [names[at + 1]]
    assert steps[at + 1]["pipeline"] in label.inner_text()
    view.get_by_test_id("nbc-passes").press("ArrowLeft")
    assert _selected(view) == [names[at]]
    view.get_by_test_id("nbc-passes").press("ArrowRight")
    assert _selected(view) == [names[at + 1]]
    # the diff of a step that changed the module, coloured + / -
    diff = view.get_by_test_id("nbc-pass-diff")
    assert diff.locator(".nbc-diff-add").count() + diff.locator(".nbc-diff-del").count() > 0

    # the fusion pass formed the loop's kernel: its link opens the kernel's code
    fusion = next(i for i, s in enumerate(steps) if s["kernels"] and s["name"] == "fusion")
    chart.locator('g[data-kind="step"]').nth(fusion).click()
    assert _selected(view) == [names[fusion]]
    kernel = steps[fusion]["kernels"][0]
    view.get_by_test_id("nbc-pass-kernel").filter(has_text=kernel).click()
    assert view.get_by_test_id("nbc-tab-compiled").get_attribute("aria-selected") == "true"
    code = view.get_by_test_id("nbc-kernel-code-holder").get_by_test_id("nbc-kernel-code")
    assert code.get_attribute("data-kernel") == kernel
    rows = code.locator(".nbc-asm")
    assert rows.count() > 10
    colours = rows.evaluate_all(
        "(rs) => [...new Set(rs.map((r) => getComputedStyle(r).borderLeftColor))]"
    )
    assert colours == [FIRST_COLOUR]  # one source line: every instruction in its colour
    assert "per kernel" in code.get_by_test_id("nbc-code-mapping").inner_text()
    line = code.get_by_test_id("nbc-code-line")
    assert line.count() == 1 and line.get_attribute("data-line") == "5"
    assert "jnp.tanh(h)" in line.inner_text()
    assert code.locator('.nbc-asm[data-highlighted="true"]').count() == 0
    line.click()  # a source line highlights its instructions
    assert code.locator('.nbc-asm[data-highlighted="true"]').count() == rows.count()
    code.scroll_into_view_if_needed()
    screenshot(page, "passes_kernel_code.png")

    # clicking another kernel's box in the Compiled graph: a library call, said so
    other = next(f["id"] for f in report["fusions"] if f["name"] != kernel)
    view.locator(f'[data-testid=nbc-fusion][data-fusion="{other}"]').click()
    code = view.get_by_test_id("nbc-kernel-code-holder").get_by_test_id("nbc-kernel-code")
    assert code.get_attribute("data-kernel") == other
    assert "NBC600" in code.inner_text() and code.locator(".nbc-asm").count() == 0
    view.locator(f'[data-testid=nbc-fusion][data-fusion="{kernel}"]').click()
    assert view.get_by_test_id("nbc-kernel-code-holder").locator(".nbc-asm").count() > 10


def test_static_fallback_shows_the_pass_chart(ui_page, tmp_path):
    import jax.numpy as jnp

    import nbcompile
    from nbcompile.report.html import render_static_html
    from nbcompile.widgets import static_page

    from ..test_report_passes import many

    c = nbcompile.compile(many, jnp.ones((64, 32)), jnp.ones((48, 32)))
    c.passes  # noqa: B018
    report = c.report()
    steps = report["extras"]["passes"]["steps"]
    page = ui_page
    path = tmp_path / "static.html"
    path.write_text(render_static_html(report, renderer=None), encoding="utf-8")
    page.goto(path.as_uri())
    section = page.locator('details[data-nbc-tab="passes"]')
    section.locator("summary").first.click()
    img = section.get_by_test_id("nbc-passes-img")
    assert img.is_visible()
    assert img.evaluate("(i) => i.complete && i.naturalWidth") > 300  # the SVG decoded
    assert section.get_by_test_id("nbc-passes-table").locator("tr[data-step]").count() == len(steps)
    assert section.get_by_test_id("nbc-static-kernel-code").count() == 5
    section.scroll_into_view_if_needed()
    screenshot(page, "passes_static.png")

    # the live page (renderer inlined): the Passes tab draws the same columns, quickly
    path = tmp_path / "live.html"
    path.write_text(static_page(report), encoding="utf-8")
    page.goto(path.as_uri())
    page.locator("[data-first-paint-ms]").wait_for()
    ms = page.evaluate(
        """() => { const t0 = performance.now();
        document.querySelector('[data-testid=nbc-tab-passes]').click();
        return new Promise((r) => requestAnimationFrame(() => setTimeout(() => r(performance.now() - t0), 0))); }"""
    )
    print(f"\nPasses tab first paint: {ms:.0f} ms")
    chart = page.get_by_test_id("nbc-passes-chart")
    assert chart.locator('g[data-kind="step"]').count() == len(steps)
    assert not page.page_errors, page.page_errors


def _chain(w, x, z):
    import jax.numpy as jnp

    h = x @ w
    for _ in range(24):
        z = jnp.tanh(z) * 0.5 + 0.25
    return h, z.sum()


def test_a_ynnpack_kernels_panel_says_its_code_is_a_stand_in(ui_page, tmp_path):
    """Issue 39: the tanh chain YNNPACK runs (a ``ynn_fusion``): once ``c.kernel_code`` made it,
    the kernel's panel shows XLA's own code with YNNPACK off, saying it is not what runs; the
    YNNPACK dot's panel names the library and its kernels."""
    import jax.numpy as jnp

    import nbcompile
    from nbcompile.widgets import static_page

    c = nbcompile.compile(
        _chain, jnp.ones((64, 64)), jnp.ones((32, 64)), jnp.ones((256, 256)), passes=True
    )
    chain = next(f.name for f in c.fusions if "tanh" in f.ops)
    dot = next(f.name for f in c.fusions if "dot" in f.ops)
    c.kernel_code(chain)
    path = tmp_path / "live.html"
    path.write_text(static_page(c.report()), encoding="utf-8")
    page = ui_page
    page.goto(path.as_uri())
    page.locator("[data-first-paint-ms]").wait_for()
    page.get_by_test_id("nbc-tab-compiled").click()
    page.locator(f'[data-testid=nbc-fusion][data-fusion="{chain}"]').click()
    code = page.get_by_test_id("nbc-kernel-code-holder").get_by_test_id("nbc-kernel-code")
    assert code.get_attribute("data-kernel") == chain
    label = code.get_by_test_id("nbc-code-stand-in")
    assert "YNNPACK off" in label.inner_text() and "not what runs" in label.inner_text()
    assert code.locator(".nbc-asm").count() > 10
    assert code.get_by_test_id("nbc-code-line").count() >= 1
    screenshot(page, "passes_stand_in.png")
    page.locator(f'[data-testid=nbc-fusion][data-fusion="{dot}"]').click()
    code = page.get_by_test_id("nbc-kernel-code-holder").get_by_test_id("nbc-kernel-code")
    assert "YNNPACK" in code.inner_text() and code.locator(".nbc-asm").count() == 0
    assert not page.page_errors, page.page_errors
