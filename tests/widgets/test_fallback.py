"""The static fallback (what a saved, untrusted notebook shows): every tab of the widget as a
section, each picture an SVG image with its figures' source, the diff view, sizes."""

from __future__ import annotations

import base64
import html as htmllib
import json
import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from nbcompile.report.diffview import diff_report
from nbcompile.report.html import render_html
from nbcompile.widgets import CompilationView

SVG_NS = "{http://www.w3.org/2000/svg}"
IMG = re.compile(
    r'<img src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)" alt="[^"]*" '
    r'data-testid="([^"]+)"'
)


def widget_tabs(report: dict[str, Any]) -> set[str]:
    """The tabs js/render.js shows for a report (its `has` table)."""
    tabs = {"graph", "stats"}
    if report["graphs"].get("compiled"):
        tabs.add("compiled")
    if (report.get("source") or {}).get("lines") or report.get("sources"):
        tabs.add("source")
    if report.get("gradient"):
        tabs.add("gradient")
    if ((report.get("extras") or {}).get("changes") or {}).get("diff"):
        tabs.add("diff")
    return tabs


def pictures(html: str) -> dict[str, ET.Element]:
    return {tid: ET.fromstring(base64.b64decode(data)) for data, tid in IMG.findall(html)}


def texts(svg: ET.Element) -> str:
    return " ".join(t.text or "" for t in svg.iter(SVG_NS + "text"))


@pytest.fixture(scope="module")
def rich() -> dict[str, Any]:
    """A real --grad compile, profiled and memory-mapped, re-run with an edited line."""
    import jax
    import jax.numpy as jnp

    import nbcompile

    jax.config.update("jax_numpy_rank_promotion", "allow")
    try:

        def loss(params, x):
            h = jnp.tanh(x @ params["w1"] + params["b1"])
            return jnp.mean((h @ params["w2"]) ** 2)

        params = {"w1": jnp.ones((32, 64)) * 0.1, "b1": jnp.zeros(64), "w2": jnp.ones((64, 8))}
        x = jnp.ones((16, 32))
        c = nbcompile.compile(loss, params, x, grad=0)
        c.run_profile(calls=3)
        c.memory_map  # noqa: B018
        report = c.report()

        def loss(params, x):  # the cell, edited: one line added
            h = jnp.tanh(x @ params["w1"] + params["b1"])
            h = jnp.exp(h) * 0.5
            return jnp.mean((h @ params["w2"]) ** 2)

        c2 = nbcompile.compile(loss, params, x, grad=0)
        diff = c2.diff(c)
    finally:
        jax.config.update("jax_numpy_rank_promotion", "raise")
    return {"report": report, "diff": diff, "after": c2.report()}


@pytest.mark.profiler  # the `rich` fixture profiles: before any TPU compile
def test_every_tab_of_the_widget_is_a_section(rich, small_report):
    changes = {
        "text": "changed since the last run of `loss`:\n+ line 3",
        "items": ["changed since the last run of `loss`:", "+ line 3"],
        "diff": rich["diff"].view,
    }
    with_diff = {**rich["after"], "extras": {**rich["after"]["extras"], "changes": changes}}
    for report in (small_report, rich["report"], with_diff):
        html = render_html(report, interactive=False)
        sections = set(re.findall(r'<details data-nbc-tab="(\w+)"', html))
        assert sections == widget_tabs(report), (sections, widget_tabs(report))
    assert "gradient" in widget_tabs(rich["report"]) and "diff" in widget_tabs(with_diff)


@pytest.mark.profiler  # the `rich` fixture profiles: before any TPU compile
def test_pictures_draw_each_tab_with_their_sources(rich):
    report = rich["report"]
    pics = pictures(render_html(report, interactive=False))
    for tid in (
        "nbc-graph-traced",
        "nbc-graph-compiled",
        "nbc-graph-gradient",
        "nbc-chart-funnel",
        "nbc-chart-flops",
        "nbc-chart-bytes",
        "nbc-chart-roofline",
        "nbc-chart-memory",
        "nbc-chart-peak-lines",
    ):
        assert tid in pics, tid
    for tid, svg in pics.items():
        if tid.startswith("nbc-chart"):  # every chart says where its figures come from
            assert re.search(r"source: .*(XLA|measured|estimate|spec|exact)", texts(svg)), tid
    # the compiled graph is coloured by measured time: its slowest kernel in the deepest red
    fills = re.findall(
        r'fill="(#ff[0-9a-f]{4})"', ET.tostring(pics["nbc-graph-compiled"], "unicode")
    )
    assert fills, "no kernel coloured by time"
    # the funnel's counts are the report's
    s = report["summary"]
    funnel = texts(pics["nbc-chart-funnel"])
    for key in ("jaxpr_eqns", "stablehlo_ops", "kernels"):
        assert f" {s[key]} " in f" {funnel} ", key


@pytest.mark.profiler  # the `rich` fixture profiles: before any TPU compile
def test_source_tab_switches_heat_measures(rich):
    # as the browser reads it: non-ASCII characters are character references (html.py)
    html = htmllib.unescape(render_html(rich["report"], interactive=False))
    table = html[html.index('data-testid="nbc-source-table"') :]
    assert "flops share (estimate)" in table and "time (measured)" in table
    assert "bytes at peak (XLA)" in table
    tanh = re.search(
        r'<tr data-line="(\d+)"><td>\d+</td><td>(\d+)%</td><td>([^<]+)</td>'
        r"<td>([^<]*)</td><td><code>\s*h = jnp.tanh",
        table,
    )
    assert tanh, "the tanh line has no flops share / time"
    assert tanh.group(3).endswith(("µs", "ms", " s"))


@pytest.mark.profiler  # the `rich` fixture profiles: before any TPU compile
def test_diff_view_data(rich):
    d = rich["diff"].view
    statuses = {k["status"] for k in d["kernels"]}
    assert "added" in statuses  # a line was added: a kernel that was not there before
    added = [k for k in d["kernels"] if k["status"] == "added"]
    assert any("exponential" in k["ops"] for k in added)
    line = next(r for r in d["lines"] if r["text"] == "h = jnp.exp(h) * 0.5")
    assert line["change"] == "added" and line["flops"][0] is None and line["flops"][1] > 0
    assert d["from"]["flops"] == "XLA" and d["from"]["line_flops"] == "estimate"
    bundle = rich["diff"]._repr_mimebundle_()
    assert {"text/plain", "text/html", "application/vnd.jupyter.widget-view+json"} <= set(bundle)
    pics = pictures(bundle["text/html"])
    added = [r for r in pics["nbc-diff-after"].iter(SVG_NS + "rect") if r.get("class") == "f-added"]
    assert added  # the added kernel in the "added" colour
    assert json.loads(json.dumps(d)) == d
    assert CompilationView(d, tab="diff").report == d


def test_diff_matches_kernels_by_line_text_not_position():
    def rep(lines: list[str], fusion_line: int, flops: float) -> dict[str, Any]:
        node = {"id": "c1", "op": "loop", "label": "fusion.7", "kind": "fusion", "fusion": "f1"}
        fusion = {
            "id": "f1",
            "name": "fusion.7",
            "kind": "loop",
            "ops": ["tanh"],
            "lines": [fusion_line],
            "locations": [],
            "modules": [],
            "flops": flops,
            "bytes": 64.0,
        }
        return {
            "name": "f",
            "source": {"lines": lines},
            "graphs": {"compiled": {"nodes": [node], "edges": []}},
            "fusions": [fusion],
            "summary": {},
            "extras": {},
        }

    before = rep(["def f(x):", "    return jnp.tanh(x)"], 2, 10.0)
    after = rep(["def f(x):", "    y = 1", "    return jnp.tanh(x)"], 3, 10.0)
    (k,) = diff_report(before, after)["kernels"]
    assert k["status"] == "same"  # the line moved down, the kernel did not change
    (k,) = diff_report(before, rep(["def f(x):", "    return jnp.tanh(x)"], 2, 20.0))["kernels"]
    assert k["status"] == "changed"


def test_compare_targets_shows_the_diff_view():
    """nbcompile.compare(c_cpu, c_tpu): the table, and the same diff view (CPU against a
    deviceless TPU v5e compile of the same model)."""
    import jax.numpy as jnp

    import nbcompile
    from nbcompile.comparison import compare_compilations
    from nbcompile.targets import compare as compare_rows

    def f(x):
        return jnp.sum(jnp.tanh(x @ x.T) * 2.0)

    x = jnp.ones((128, 128))
    cs = [nbcompile.compile(f, x), nbcompile.compile(f, x, backend="tpu", topology="v5e:2x2")]
    labels = [c.target.label.upper() for c in cs]
    table = compare_rows(
        [(label, c.hlo, c.cost, c.memory) for label, c in zip(labels, cs, strict=True)]
    )
    comparison = compare_compilations(table, *cs)
    (view,) = comparison.views
    assert (view["before"]["label"], view["after"]["label"]) == tuple(labels)
    assert view["before"]["backend"] == "cpu" and view["after"]["backend"] == "tpu"
    assert view["kernels"] and {k["status"] for k in view["kernels"]} & {"added", "removed"}
    bundle = comparison._repr_mimebundle_()
    assert bundle["text/plain"] == comparison.text() and "CPU" in bundle["text/plain"]
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert {"nbc-diff-before", "nbc-diff-after"} <= set(pictures(bundle["text/html"]))
    assert comparison["rows"] == table["rows"]  # reads through to the table, as compare() did
