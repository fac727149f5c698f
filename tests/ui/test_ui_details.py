"""Details that agree (issue 42, items 2, 4 and 5), in Chromium, on the saved pages of two of
the whiteboard models (whiteboard_models.py): the plain-JAX MLP compiled with ``--grad
--passes`` and the Flax NNX transformer with ``--grad``, each from its cells run in IPython.

- one op count for one program everywhere: the header's, the Graph status line's, the Stats
  tab's (forward and train step), the Gradient tab's forward + backward and its status line;
  the Compiled status line counts the kernels the header counts, for either program;
- one pass count: the Passes chart's title and the Stats tab's passes line;
- library kernels said plainly: the costliest kernel (a YNNPACK dot) says what runs it, no
  "[NBC600]", and the kernel code's note names the costlier library calls;
- a kernel's line is its function's own line, then the line that called it; a node's call
  path is its calls (no "module path: loss");
- the train step's kernels in the Source and Stats tabs, with the Compiled tab's one switch
  (shown on those three tabs only);
- the status line says "scroll or drag" exactly while part of the drawing is off the canvas;
- the user's names: parameters as named (``params[0]['w']``), module frames with their class
  (``Block``), the Stats bars' call/module column.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from .helpers import screenshot
from .whiteboard_models import MODELS

pytestmark = pytest.mark.ui
_PAGES: dict[str, tuple[Path, dict]] = {}


def _page_of(name: str, flags: str, tmp: Path) -> tuple[Path, dict]:
    """The saved page and report of model ``name`` compiled by its cell with ``flags``."""
    if name not in _PAGES:
        import jax
        from IPython import get_ipython
        from IPython.testing.globalipapp import start_ipython

        import nbcompile

        jax.config.update("jax_numpy_dtype_promotion", "standard")
        jax.config.update("jax_numpy_rank_promotion", "allow")
        try:
            shell = start_ipython() or get_ipython()  # None once started in this process
            shell.run_line_magic("load_ext", "nbcompile")
            shell.reset(new_session=False)
            cells, cell = MODELS[name]
            for text in cells:
                assert shell.run_cell(text).success
            res = shell.run_cell(cell.replace("%%compile --grad", f"%%compile -q {flags}"))
            assert res.success, (res.error_before_exec, res.error_in_exec)
            c = nbcompile.last()
            path = Path(c.save_html(str(tmp / f"{name}.html")))
            _PAGES[name] = (path, c.report())
        finally:
            jax.config.update("jax_numpy_dtype_promotion", "strict")
            jax.config.update("jax_numpy_rank_promotion", "raise")
    return _PAGES[name]


def _open(page: Any, path: Path) -> Any:
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(path.as_uri())
    page.locator("[data-first-paint-ms]").wait_for()
    return page.locator(".nbc-root").first


def _tab(view: Any, tab: str) -> None:
    view.get_by_test_id(f"nbc-tab-{tab}").click()


def _count(text: str, unit: str) -> int:
    m = re.search(rf"([\d.]+K?) {unit}", text)
    assert m, (unit, text)
    v = m.group(1)
    return int(float(v[:-1]) * 1000) if v.endswith("K") else int(v)


def _where(f: dict) -> str:
    """A kernel's call / module as the bars write it (report/statsfig.py: fusion_where)."""
    from nbcompile.report.statsfig import fusion_where

    return fusion_where(f)


def _stats_ops(view: Any) -> int:
    table = view.get_by_test_id("nbc-panel-stats").get_by_test_id("nbc-stats-summary")
    return int(table.locator("tr").first.locator("td").inner_text())


def test_the_mlps_details_agree(ui_page, tmp_path):
    path, report = _page_of("mlp", "--grad --passes", tmp_path)
    s, g = report["summary"], report["gradient_summary"]
    page = ui_page
    view = _open(page, path)
    header = view.locator(".nbc-header").inner_text()
    assert f"forward: {s['traced_ops']} ops → {s['kernels']} kernels" in header
    assert f"train step: {g['traced_ops']} ops → {g['kernels']} kernels" in header
    status = view.get_by_test_id("nbc-status")

    # one op count: Graph, Stats (forward and train step), Gradient
    assert _count(status.inner_text(), "ops") == s["traced_ops"]
    _tab(view, "gradient")
    assert _count(status.inner_text(), "ops") == g["traced_ops"]
    panel = view.get_by_test_id("nbc-gradient").inner_text()
    fwd, back = (
        int(re.search(rf"{w} ops\s+(\d+)", panel).group(1)) for w in ("forward", "backward")
    )
    assert fwd + back == g["traced_ops"]
    assert "with respect to\tparams (argument 0)" in panel
    switch = view.get_by_test_id("nbc-step-switch")
    assert not switch.is_visible()  # the forward / train switch only where it applies
    _tab(view, "stats")
    assert (
        switch.is_visible()
        and view.get_by_test_id("nbc-show-step").get_attribute("aria-checked") == "true"
    )
    assert _stats_ops(view) == g["traced_ops"]
    stats = view.get_by_test_id("nbc-panel-stats")
    assert "train step" in stats.get_by_test_id("nbc-chart-funnel").text_content()
    where = (
        stats.get_by_test_id("nbc-chart-flops").get_by_test_id("nbc-bar-where").all_text_contents()
    )
    top = sorted(report["gradient_fusions"], key=lambda f: -(f["flops"] or 0))[:10]
    assert len(where) == 10 and all("layer#" in w for w in where), where
    assert where == [_where(f) for f in top], where  # the train step's ten costliest
    screenshot(page, "details_stats_step.png")
    view.get_by_test_id("nbc-show-forward").click()
    assert _stats_ops(view) == s["traced_ops"]
    assert "train step" not in stats.get_by_test_id("nbc-chart-funnel").text_content()

    # one pass count
    p = report["extras"]["passes"]
    changed = sum(1 for st in p["steps"] if st["changed"])
    assert f"{changed} changed the module" in stats.get_by_test_id("nbc-extra-passes").inner_text()
    _tab(view, "passes")
    title = view.get_by_test_id("nbc-fig-passes").locator("figcaption").inner_text()
    assert f": {changed} of {p['total_steps']} steps" in title

    # the Compiled tab (forward, as the switch was left): kernels as counted in the header
    _tab(view, "compiled")
    assert view.get_by_test_id("nbc-show-forward").get_attribute("aria-checked") == "true"
    assert _count(status.inner_text(), "kernels") == s["kernels"]
    # the costliest kernel is a YNNPACK dot: said plainly, with what runs it
    top = max(report["fusions"], key=lambda f: f["flops"] or 0)
    view.get_by_test_id("nbc-fusion-table").get_by_text(top["name"], exact=True).click()
    code = view.get_by_test_id("nbc-kernel-code-holder").inner_text()
    assert code.startswith(f"{top['name']}: YNNPACK library call (dot f32["), code
    assert "— code: YNNPACK picks its kernel at run time" in code and "NBC" not in code
    details = view.get_by_test_id("nbc-details").inner_text()
    assert "(YNNPACK library call)" in details
    # its line: the function's own (layer's), then the compiling cell's line that called it
    assert re.search(r"line\s+In \[\d+\] line 4 return jnp\.tanh", details), details
    assert re.search(r"called from\s+L3 return jnp\.mean", details), details
    # a kernel with code of XLA's own: the panel names the costlier library calls
    cheap = next(
        f
        for f in report["fusions"]
        if not f.get("library") and f["name"] not in {k["name"] for k in p["kernel_code"]}
    )
    view.get_by_test_id("nbc-fusion-table").get_by_text(cheap["name"], exact=True).click()
    note = view.get_by_test_id("nbc-code-none").inner_text()
    assert "costliest kernels XLA wrote code for (costlier still: " in note and top["name"] in note
    screenshot(page, "details_library_call.png")

    # a node's call path, not "module path: loss"
    _tab(view, "graph")
    view.get_by_test_id("nbc-expand-all").click()
    view.locator('[data-kind="op"][data-name^="dot_general"]').first.click()
    details = view.get_by_test_id("nbc-details").inner_text()
    assert re.search(r"call path\s+mlp#1 › layer#\d+", details), details
    assert "module path" not in details

    # the Source tab: the train step's kernels with the switch on "train step"
    _tab(view, "source")
    view.get_by_test_id("nbc-show-step").click()
    source = view.get_by_test_id("nbc-source")
    assert source.get_attribute("data-program") == "train step"
    chips = set(
        source.locator(".nbc-chip[data-fusion]").evaluate_all(
            "(cs) => cs.map((c) => c.getAttribute('data-fusion'))"
        )
    )
    backward = {f["name"] for f in report["gradient_fusions"] if f.get("phase") == "backward"}
    assert chips & backward and chips <= {f["name"] for f in report["gradient_fusions"]}
    assert "train step's flops" in view.get_by_test_id("nbc-heat-caption").inner_text()
    chip = source.locator(f'.nbc-chip[data-fusion="{sorted(chips & backward)[0]}"]').first
    chip.click()  # selects the kernel in the train step's graph
    assert "gradient_compiled node" in view.get_by_test_id("nbc-details").inner_text()
    view.get_by_test_id("nbc-show-forward").click()
    assert view.get_by_test_id("nbc-source").get_attribute("data-program") == "forward"

    # the user's parameter names on the compiled kernels
    _tab(view, "compiled")
    view.get_by_test_id("nbc-expand-all").click()
    names = view.get_by_test_id("nbc-canvas-compiled").text_content()
    assert "params[" in names and "params_" not in names
    assert not page.page_errors, page.page_errors


def test_the_nnx_frames_and_the_scroll_status(ui_page, tmp_path):
    path, report = _page_of("nnx", "--grad", tmp_path)
    page = ui_page
    view = _open(page, path)
    status = view.get_by_test_id("nbc-status")
    canvas = view.get_by_test_id("nbc-canvas-graph")
    block = canvas.locator('[data-kind="group"][data-name="blocks_0"]').first
    assert "Block · " in block.text_content()
    assert _count(status.inner_text(), "ops") == report["summary"]["traced_ops"]
    # the first picture fits: no "scroll"; zoomed in, part is off the canvas: it says so; ⤢
    # brings the whole picture back, and the status line with it
    assert "scroll" not in status.inner_text()
    for _ in range(4):
        view.get_by_test_id("nbc-zoom-in").click()
    assert "scroll or drag to see the rest" in status.inner_text()
    view.get_by_test_id("nbc-fit").click()
    assert "scroll" not in status.inner_text()
    # the train step's kernels: as many as the header says; frames with their classes
    _tab(view, "compiled")
    g = report["gradient_summary"]
    assert _count(status.inner_text(), "kernels") == g["kernels"]
    frame = view.get_by_test_id("nbc-canvas-compiled").locator(
        '[data-kind="group"][data-name="blocks_1 (backward)"]'
    )
    assert "Block · " in frame.first.text_content()
    screenshot(page, "details_nnx_compiled.png")
    _tab(view, "stats")
    assert _stats_ops(view) == g["traced_ops"]
    where = (
        view.get_by_test_id("nbc-chart-flops").get_by_test_id("nbc-bar-where").all_text_contents()
    )
    assert all("blocks_" in w or "head" in w for w in where), where
    assert not page.page_errors, page.page_errors
