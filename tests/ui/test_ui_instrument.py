"""The view as an instrument, in JupyterLab and Jupyter Notebook 7 (issue 20): what a person sees.

One notebook (a model cell, a ``%%compile --grad --profile --memory`` cell, the model cell
edited with one more line, the diff) per host: every drawn node inside the visible canvas after
fit-to-view (Graph, Compiled, Gradient), the Stats charts with their sources, the Source tab over
the model's own cell with its heat measures, SVG and PNG export, the diff view's added kernel in
the "added" colour. Saved and reopened untrusted: the static fallback has every tab and its
pictures are whole. The exported page (``save_html``): the graph drawn at the canvas' size.
"""

from __future__ import annotations

import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import nbformat
import pytest

from .helpers import ARTIFACTS, kernel_env, screenshot

pytestmark = [pytest.mark.ui, pytest.mark.profiler]  # profiler: before any TPU compile

MODEL = """import jax.numpy as jnp
import nbcompile
def loss(params, x):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"]) ** 2)
params = {"w1": jnp.ones((64, 128)) * 0.01, "b1": jnp.zeros(128), "w2": jnp.ones((128, 16))}
x = jnp.ones((32, 64))"""
COMPILE = "%%compile --grad --profile 3 --memory\nloss(params, x)"
EDITED = MODEL.replace("    return jnp.mean", "    h = jnp.exp(h) * 0.5\n    return jnp.mean")
CELLS = [
    "%load_ext nbcompile",
    MODEL,
    COMPILE,
    "c1 = nbcompile.last()",
    EDITED,
    "%%compile -q --grad\nloss(params, x)",
    "nbcompile.last().diff(c1)",
]

READY = """() => { const a = window.jupyterapp, w = a && a.shell && a.shell.currentWidget;
  const ctx = w && w.sessionContext, k = ctx && ctx.session && ctx.session.kernel;
  return !!(k && ctx.isReady && k.status === 'idle'); }"""
RUN_ALL = """() => Promise.race([
  window.jupyterapp.commands.execute('notebook:run-all-cells'),
  new Promise((_, reject) => setTimeout(() => reject(new Error('run-all timed out')), 150000))])"""
#: every drawn box of a canvas against the canvas' own rectangle (after fit-to-view)
FIT = """(canvas) => { const c = canvas.getBoundingClientRect(), out = [];
  const boxes = canvas.querySelectorAll('g.nbc-unit, g.nbc-cluster-head');
  for (const u of boxes) { const r = u.getBoundingClientRect();
    if (r.left < c.left - 1 || r.top < c.top - 1 || r.right > c.right + 1 || r.bottom > c.bottom + 1)
      out.push(u.getAttribute('data-key')); }
  const svg = canvas.querySelector('svg.nbc-svg').getBoundingClientRect();
  return {outside: out, boxes: boxes.length, svgH: svg.height, svgW: svg.width,
          canvasH: c.height, canvasW: c.width}; }"""


def shot(element, name: str) -> None:
    """A picture of one view as a person sees it (build/ui-artifacts; docs/img comes from here)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    element.scroll_into_view_if_needed()
    element.screenshot(path=str(ARTIFACTS / name))


def _notebook(path: Path) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in CELLS])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)


def check_fit(canvas) -> dict:
    canvas.scroll_into_view_if_needed()
    got = canvas.evaluate(FIT)
    assert got["boxes"] > 0, "nothing drawn"
    assert not got["outside"], f"boxes outside the visible canvas: {got['outside'][:5]}"
    # the drawing fills its canvas (the exported page's defect: a 150 px tall <svg>)
    assert abs(got["svgH"] - got["canvasH"]) <= 3 and abs(got["svgW"] - got["canvasW"]) <= 3, got
    return got


def check_graph_tabs(view) -> None:
    for tab in ("graph", "compiled", "gradient"):
        view.get_by_test_id(f"nbc-tab-{tab}").click()
        view.get_by_test_id("nbc-fit").click()
        check_fit(view.get_by_test_id(f"nbc-canvas-{tab}"))


def check_stats(view) -> None:
    view.get_by_test_id("nbc-tab-stats").click()
    for chart in ("nbc-chart-funnel", "nbc-chart-flops", "nbc-chart-roofline", "nbc-chart-memory"):
        fig = view.get_by_test_id(chart)
        box = fig.locator("svg").first.bounding_box()
        assert box and box["width"] > 100 and box["height"] > 40, chart
        assert fig.get_by_test_id("nbc-from").inner_text().startswith("source: "), chart
    assert view.get_by_test_id("nbc-roof").count() == 1
    assert view.locator("[data-testid=nbc-chart-memory] path.nbc-area").count() >= 2
    assert view.get_by_test_id("nbc-top-kernels-table").locator("tr").count() >= 2
    assert view.get_by_test_id("nbc-fits").inner_text().startswith("Will it fit?")


def check_source(view) -> None:
    """The model's own cell, annotated; the heat map switches to measured time and bytes."""
    view.get_by_test_id("nbc-tab-source").click()
    assert "In [2]" in view.get_by_test_id("nbc-source-head").first.inner_text()
    tanh = view.locator("[data-testid^='nbc-line-In [2] line']", has_text="jnp.tanh")
    for mode in ("time", "bytes", "flops"):
        view.get_by_test_id(f"nbc-heat-{mode}").click()
        assert view.get_by_test_id("nbc-source").get_attribute("data-heat-mode") == mode
        assert float(tanh.get_attribute("data-heat") or 0) > 0, mode


def check_export(page, view, tmp: Path) -> None:
    view.get_by_test_id("nbc-tab-compiled").click()
    with page.expect_download() as got:
        view.get_by_test_id("nbc-export-svg").click()
    svg = ET.parse(got.value.path()).getroot()
    assert svg.tag.endswith("svg") and float(svg.get("width")) > 50
    texts = " ".join(t.text or "" for t in svg.iter("{http://www.w3.org/2000/svg}text"))
    assert "fusion" in texts
    with page.expect_download() as got:
        view.get_by_test_id("nbc-export-png").click()
    png = Path(got.value.path()).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert width > 100 and height > 50
    (tmp / "export.png").write_bytes(png)


def check_diff(page, diff) -> None:
    after = diff.get_by_test_id("nbc-diff-after")
    added = after.locator(".nbc-unit.nbc-d-added")
    assert added.count() >= 1, "no kernel drawn as added after a line was added"
    fill = added.first.locator("rect:not(.nbc-bg)").evaluate("(r) => getComputedStyle(r).fill")
    assert fill == "rgba(67, 160, 71, 0.35)", fill
    assert diff.get_by_test_id("nbc-diff-kernels").inner_text().count("added") >= 1
    assert "jnp.exp(h)" in diff.get_by_test_id("nbc-diff-lines").inner_text()
    for side in ("before", "after"):
        check_fit(diff.get_by_test_id(f"nbc-diff-{side}").locator(".nbc-canvas"))


def test_view_in_the_host(ui_page, host, tmp_path):
    page = ui_page
    _notebook(host["root"] / "instrument.ipynb")
    page.goto(host["open"]("instrument.ipynb"))
    page.wait_for_selector(".jp-Notebook")
    page.wait_for_function(READY, timeout=90_000)
    assert page.evaluate(RUN_ALL) is True
    view = page.locator(".jp-OutputArea-output .nbc-root:not(.nbc-diff)").first
    view.get_by_test_id("nbc-tab-gradient").wait_for(timeout=60_000)
    check_graph_tabs(view)  # ends on the Gradient tab
    shot(view, f"view-gradient_{host['app']}.png")
    view.get_by_test_id("nbc-tab-graph").click()
    shot(view, f"view-graph_{host['app']}.png")
    check_stats(view)
    shot(view, f"view-stats_{host['app']}.png")
    check_source(view)
    view.get_by_test_id("nbc-heat-time").click()
    shot(view, f"view-source_{host['app']}.png")
    check_export(page, view, tmp_path)
    diff = page.locator(".jp-OutputArea-output .nbc-root.nbc-diff").first
    diff.get_by_test_id("nbc-diff-after").wait_for()
    check_diff(page, diff)
    shot(diff, f"view-diff_{host['app']}.png")
    screenshot(page, f"host_{host['app']}.png")


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """The notebook run by nbclient and saved unsigned: its outputs are untrusted when opened."""
    import os

    from nbclient import NotebookClient

    folder = tmp_path_factory.mktemp("saved")
    path = folder / "saved_instrument.ipynb"
    _notebook(path)
    nb = nbformat.read(path, as_version=4)
    env = kernel_env()
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        NotebookClient(
            nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(folder)}}
        ).execute()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    nbformat.write(nb, path)
    return path


#: each image of the fallback: loaded, shown whole (not cropped), every node box inside the
#: picture's own viewBox
PICTURES = """(out) => [...out.querySelectorAll('img[src^="data:image/svg+xml;base64,"]')].map((img) => {
  const r = img.getBoundingClientRect(), o = out.getBoundingClientRect();
  const svg = new DOMParser().parseFromString(atob(img.src.split(',')[1]), 'image/svg+xml').documentElement;
  const [, , W, H] = svg.getAttribute('viewBox').split(' ').map(Number);
  const outside = [...svg.querySelectorAll('g[transform] > rect')].filter((rect) => {
    const g = rect.parentNode, m = /translate\\(([-\\d.]+),([-\\d.]+)\\)/.exec(g.getAttribute('transform'));
    let x = +m[1], y = +m[2], p = g.parentNode;
    const t = p && p.getAttribute && /translate\\(([-\\d.]+),([-\\d.]+)\\)/.exec(p.getAttribute('transform') || '');
    if (t) { x += +t[1]; y += +t[2]; }
    return x < 0 || y < 0 || x + +rect.getAttribute('width') > W + 0.5 || y + +rect.getAttribute('height') > H + 0.5;
  }).length;
  return {alt: img.alt, loaded: img.complete && img.naturalWidth > 0, outside,
          whole: r.width <= o.width + 1 && Math.abs(r.height / r.width - img.naturalHeight / img.naturalWidth) < 0.02};
})"""


def test_saved_notebook_fallback_in_the_host(ui_page, host, saved):
    page = ui_page
    target = host["root"] / saved.name
    target.write_bytes(saved.read_bytes())
    page.goto(host["open"](saved.name))
    output = page.locator(
        ".jp-OutputArea-output", has=page.locator("summary", has_text="Stats")
    ).first
    output.wait_for(timeout=60_000)
    assert page.locator(".jp-OutputArea-output .nbc-root").count() == 0  # no script ran
    summaries = [t.strip() for t in output.locator("summary > b").all_inner_texts()]
    assert summaries == ["Graph", "Compiled", "Source", "Gradient", "Stats"], summaries
    for summary in output.locator("summary:has(> b)").all():  # open every tab
        if summary.evaluate("(s) => !s.parentElement.open"):
            summary.click()
    page.wait_for_function(
        "(o) => [...o.querySelectorAll('img')].every((i) => i.complete)",
        arg=output.element_handle(),
    )
    pictures = output.evaluate(PICTURES)
    alts = {p["alt"] for p in pictures}
    for alt in (
        "traced program of loss",
        "compiled program of loss",
        "gradient program of loss",
        "op counts",
        "roofline",
        "memory timeline",
    ):
        assert alt in alts, (alt, alts)
    for p in pictures:
        assert p["loaded"] and p["whole"] and p["outside"] == 0, p
    assert "jnp.tanh" in output.locator("table").filter(has_text="bytes at peak").first.inner_text()
    text = output.inner_text()
    assert "Top kernels by time" in text and "Will it fit?" in text and "raw XLA figures" in text
    diff_pics = page.locator(".jp-OutputArea-output img[alt='compiled program, after']")
    assert diff_pics.count() == 1
    screenshot(page, f"saved_fallback_{host['app']}.png")


def test_exported_pages_draw_the_whole_graph(ui_page, saved, relaxed_dtypes):
    """The exported pages opened offline: `nbcompile render` (nbconvert's page around the
    fallback, where JupyterLab's CSS made the graph's <svg> 150 px tall, clipped) and
    c.save_html(path): every tab, the graph fills its canvas and fits after fit-to-view."""
    import jax.numpy as jnp

    import nbcompile
    from nbcompile.render import strip_widgets, to_html

    page = ui_page
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    nb = nbformat.read(saved, as_version=4)
    strip_widgets(nb)
    rendered = ARTIFACTS / "rendered.html"
    rendered.write_text(to_html(nb), encoding="utf-8")
    page.goto(rendered.as_uri())
    view = page.locator(".nbc-root:not(.nbc-diff)").first
    view.get_by_test_id("nbc-tab-gradient").wait_for()
    check_graph_tabs(view)

    def loss(params, x):
        h = jnp.tanh(x @ params["w1"] + params["b1"])
        return jnp.mean((h @ params["w2"]) ** 2)

    params = {"w1": jnp.ones((64, 128)) * 0.01, "b1": jnp.zeros(128), "w2": jnp.ones((128, 16))}
    c = nbcompile.compile(loss, params, jnp.ones((32, 64)), grad=0)
    c.run_profile(calls=3)
    c.memory_map  # noqa: B018
    path = Path(c.save_html(str(ARTIFACTS / "exported.html")))
    page.goto(path.as_uri())
    page.locator("[data-first-paint-ms]").wait_for()
    assert page.locator("[data-nbc-fallback]").is_hidden()
    view = page.locator(".nbc-root").first
    tabs = view.locator("[role=tab]").all_inner_texts()
    assert tabs == ["Graph", "Compiled", "Source", "Gradient", "Stats"], tabs
    check_graph_tabs(view)
    check_stats(view)
    assert not page.page_errors, page.page_errors
