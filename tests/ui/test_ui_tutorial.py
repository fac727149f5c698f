"""The quickstart tutorial in a real browser: run all, use the view; reopen it saved."""

from __future__ import annotations

import shutil

import nbformat
import pytest

from .helpers import REPO, kernel_env, screenshot
from .test_ui_view import RUN_ALL, _open

pytestmark = pytest.mark.ui

QUICKSTART = REPO / "notebooks" / "01_quickstart.ipynb"


def test_quickstart_run_all_then_fusion_to_source(ui_page, lab_session):
    page, lab = ui_page, lab_session
    shutil.copy(QUICKSTART, lab["root"] / "quickstart.ipynb")
    _open(page, lab, "quickstart.ipynb")
    assert page.evaluate(RUN_ALL) is True
    view = page.locator(".jp-OutputArea-output .nbc-root").first
    view.get_by_test_id("nbc-tab-compiled").wait_for(timeout=60_000)
    view.get_by_test_id("nbc-tab-compiled").click()
    fusion = view.get_by_test_id("nbc-fusion").first
    fusion.click()
    details = view.get_by_test_id("nbc-details").inner_text()
    assert details.strip(), "clicking a fusion shows no details"
    view.get_by_test_id("nbc-tab-source").click()
    lit = view.locator('[data-testid^=nbc-line-][data-highlighted="true"]')
    lines = {
        int(lit.nth(i).get_attribute("data-testid").rsplit("-", 1)[1]) for i in range(lit.count())
    }
    # the quickstart's model occupies visible lines 2-6 of its %%compile cell
    assert lines and lines <= {2, 3, 4, 5, 6}, lines
    view.get_by_test_id("nbc-tab-graph").click()
    view.get_by_test_id("nbc-search").fill("dot_general")
    assert view.get_by_test_id("nbc-match-count").inner_text() == "2 matches"
    screenshot(page, "quickstart_live.png")


def test_saved_executed_quickstart_shows_the_graph_without_running(
    ui_page, lab_session, monkeypatch
):
    from nbclient import NotebookClient

    page, lab = ui_page, lab_session
    path = lab["root"] / "saved_quickstart.ipynb"
    shutil.copy(QUICKSTART, path)
    for key, value in kernel_env().items():
        monkeypatch.setenv(key, value)
    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb, kernel_name="python3", timeout=180, resources={"metadata": {"path": str(lab["root"])}}
    ).execute()
    nbformat.write(nb, path)
    page.goto(f"{lab['url']}/lab/tree/saved_quickstart.ipynb?reset")
    img = page.locator('.jp-OutputArea-output img[src^="data:image/svg+xml;base64,"]').first
    img.wait_for(timeout=60_000)
    assert page.evaluate("(el) => el.naturalWidth", img.element_handle()) > 50
    screenshot(page, "saved_quickstart.png")


def test_debug_value_summary_on_node_click(ui_page, tmp_path):
    """--debug puts each op's value summary on its node: clicking the node shows it."""
    import jax.numpy as jnp

    import nbcompile
    from nbcompile.widgets import static_page

    def unstable(x):
        big = jnp.exp(x * 100.0)
        return (big / big).sum()

    c = nbcompile.compile(unstable, jnp.linspace(-1.0, 1.0, 64, dtype=jnp.float32))
    c.run_debug()
    report = c.report()
    div = next(n for n in report["graphs"]["traced"]["nodes"] if n["op"] == "div")
    assert div["value"]["first_nan"] and div["value"]["nan"] > 0
    page = ui_page
    path = tmp_path / "debug.html"
    path.write_text(static_page(report), encoding="utf-8")
    page.goto(path.as_uri())
    node = page.locator(f'[data-testid=nbc-node][data-id="{div["id"]}"]').first
    node.wait_for(timeout=20_000)
    node.click()
    value = page.get_by_test_id("nbc-value").first
    assert "NaN" in value.inner_text() and "first NaN" in value.inner_text()
