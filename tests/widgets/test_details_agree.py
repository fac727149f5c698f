"""Details that agree (issue 42, items 2, 4 and 5), on the reports of the four whiteboard models
(tests/ui/whiteboard_models.py, each compiled by its ``%%compile --grad`` cell) and on the
static copy drawn from them; the browser test tests/ui/test_ui_details.py checks the widget:

- one op count for one program everywhere: the summary's ``traced_ops`` is the traced graph's
  ops, the text summary's and the static page's; the Gradient tab's forward + backward ops are
  the train step's ``traced_ops`` (a nested call's wrapper equation is no op);
- one pass count: the Passes chart's title and the Stats line count the same changed steps;
- library kernels said plainly: the costliest kernels a library runs carry what runs them (the
  words of ``c.kernel_code``'s answer), no raw ``[NBC600]``, and the kernel code's heading names
  the costlier library calls instead of implying they have code;
- a kernel's line is the line its ops were written on (a function's own line), not the
  compiling cell's line that called it;
- the train step's kernels (forward and backward) per line and its counts for the Source and
  Stats tabs (``gradient_lines``, ``gradient_summary``), shown by the static copy as its
  Compiled tab shows the train step;
- the user's names: a compiled program's parameters as the user named them (``params[0]['w']``),
  module frames with their classes (``blocks_0 · Block``), a call/module column in the Stats
  bars.
"""

from __future__ import annotations

import base64
import re

import pytest

from nbcompile.report import text_lines
from nbcompile.report.fallback import fallback_html, source_table
from nbcompile.report.graphmodel import node_line, prepare_graph
from nbcompile.report.passesfig import code_heading, passes_html, passes_title
from nbcompile.report.scene import build_scene, initial_expansion
from nbcompile.report.statsfig import fusion_where, stats_html
from nbcompile.report.svg import graph_scene
from tests.ui.whiteboard_models import MODELS

from .test_whiteboard import _report

pytestmark = [pytest.mark.filterwarnings("ignore:'.value' access is now deprecated")]
IMG = re.compile(r'data-testid="([\w-]+)"[^>]*src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)"')
IMG2 = re.compile(r'src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)"[^>]*data-testid="([\w-]+)"')
_PASSES: dict[str, dict] = {}


def _pictures(html: str) -> dict[str, str]:
    """The static page's SVG pictures by test id, decoded."""
    out = {tid: base64.b64decode(b).decode() for tid, b in IMG.findall(html)}
    out.update({tid: base64.b64decode(b).decode() for b, tid in IMG2.findall(html)})
    return out


def _passes_report(shell) -> dict:
    """The MLP's report compiled with ``--grad --passes`` (XLA's dump and the kernels' code)."""
    if "mlp" not in _PASSES:
        import nbcompile

        cells, cell = MODELS["mlp"]
        shell.reset(new_session=False)
        for text in cells:
            assert shell.run_cell(text).success
        res = shell.run_cell(cell.replace("%%compile --grad", "%%compile -q --grad --passes"))
        assert res.success, (res.error_before_exec, res.error_in_exec)
        _PASSES["mlp"] = nbcompile.last().report()
    return _PASSES["mlp"]


@pytest.mark.parametrize("name", list(MODELS))
def test_one_op_count_for_one_program(shell, relaxed_dtypes, name):
    report = _report(shell, name)
    s, g = report["summary"], report["gradient_summary"]
    ops = sum(n["kind"] == "op" for n in report["graphs"]["traced"]["nodes"])
    assert s["traced_ops"] == ops > 0
    calls = sum(n["kind"] == "call" for n in report["graphs"]["traced"]["nodes"])
    assert s["jaxpr_eqns"] == ops + calls  # the equation count counts the wrappers: not shown
    # the train step: its graph's ops, split into forward and backward in the Gradient tab
    step_ops = sum(n["kind"] == "op" for n in report["graphs"]["gradient"]["nodes"])
    grad = report["gradient"]
    assert g["traced_ops"] == step_ops == grad["forward_ops"] + grad["backward_ops"]
    # the text summary and the static page say the same number
    assert any(f"{ops} traced ops" in line for line in text_lines(report))
    assert f"{ops} traced ops → {s['kernels']} kernels" in fallback_html(report)
    funnel = _pictures(stats_html(report))["nbc-chart-funnel"]
    assert re.search(rf">{ops}<", funnel.split("kernels that")[0]), funnel


def test_one_pass_count_and_library_kernels_said_plainly(shell, relaxed_dtypes):
    report = _passes_report(shell)
    p = report["extras"]["passes"]
    changed = sum(1 for st in p["steps"] if st["changed"])
    assert f"{changed} of {p['total_steps']} steps" in passes_title(p)
    assert f"{changed} changed the module" in p["text"]
    assert len(p["steps"]) == changed + 1  # the chart's first column: the module as received
    # the costliest kernels are YNNPACK's dots: each said plainly, with what runs it
    costliest = max(report["fusions"], key=lambda f: f["flops"] or 0)
    assert costliest.get("library") == "YNNPACK"
    call = next(c for c in p["library_calls"] if c["name"] == costliest["name"])
    assert call["library"] == "YNNPACK" and call["what"].startswith("dot f32[")
    assert "picks its kernel at run time" in call["code"]
    # the heading of the kernels' code does not imply the costliest has code: it names it
    heading = code_heading(p)
    assert heading.startswith(f"the code of the {len(p['kernel_code'])} costliest kernels XLA")
    assert costliest["name"] in heading and "YNNPACK library calls" in heading
    assert costliest["name"] not in {k["name"] for k in p["kernel_code"]}
    assert costliest["name"] in passes_html(report)
    # no raw error code in what a panel shows
    assert not any(w["why"].startswith("[NBC") for w in p["kernels_without_code"])


def test_a_kernels_line_is_its_functions_own_line(shell, relaxed_dtypes):
    """The MLP's kernels come from ``layer``'s line (In [1] line 4), called from the compiling
    cell's line 3: the box says the function's own line."""
    report = _report(shell, "mlp")
    pg = prepare_graph(report["graphs"]["compiled"], report)
    scene = build_scene(pg, initial_expansion(pg, 400, 400, 400, False))
    kernels = [b for b in scene.boxes.values() if b.node and b.node.get("kind") == "fusion"]
    cell = report["source"]["filename"]
    # the layers' kernels: written in another cell, called from the compiling cell's line 3
    # (the loss's own kernels are on line 3 itself)
    inside = [
        b
        for b in kernels
        if b.node.get("loc") and b.node.get("line") == 3 and b.node.get("file") != cell
    ]
    assert len(inside) >= 10
    for b in inside:
        own = node_line(pg, b.node)
        assert own == b.node["loc"] and own.endswith("line 4"), own
        assert b.lines[2].endswith(" · " + own), b.lines
        assert not b.lines[2].endswith(" · L3")


@pytest.mark.parametrize("name", list(MODELS))
def test_the_train_step_for_source_and_stats(shell, relaxed_dtypes, name):
    report = _report(shell, name)
    names = {f["name"] for f in report["gradient_fusions"]}
    lines = report["gradient_lines"]
    backward = {f["name"] for f in report["gradient_fusions"] if f.get("phase") == "backward"}
    got = {k for e in lines.values() for k in e.get("fusions") or []}
    assert got <= names and got & backward, name  # the backward kernels are on their lines
    assert sum(e.get("ops", 0) for e in lines.values()) >= report["gradient_summary"]["traced_ops"]
    assert all("nodes" not in e for e in lines.values())  # a count, not the node lists
    # the static copy shows the train step in Source and Stats, as its Compiled tab does
    step_table = source_table(report, step=True)
    assert any(k in step_table for k in backward)
    # a line with both shows forward and backward kernels in turn (not its first four forward)
    rows = dict(re.findall(r'<tr data-line="([^"]+)">(.*?)</tr>', step_table))
    both = [
        k
        for k, e in lines.items()
        if k in rows and {f in backward for f in e.get("fusions") or []} == {True, False}
    ]
    assert both, name
    for key in both:
        assert set(re.findall(r"[\w.]+", rows[key])) & backward, (key, rows[key])
    assert not any(
        k in source_table(report) for k in backward - {f["name"] for f in report["fusions"]}
    )
    stats = _pictures(stats_html(report, step=True))
    funnel = stats["nbc-chart-funnel"]
    assert "train step" in funnel
    g = report["gradient_summary"]
    assert re.search(rf"\b{g['traced_ops']}\b", funnel) and re.search(
        rf"\b{g['kernels']}\b", funnel
    )
    html = fallback_html(report)
    assert "train step" in _pictures(html)["nbc-chart-funnel"]


@pytest.mark.parametrize("name", list(MODELS))
def test_compiled_parameters_are_named_as_the_user_named_them(shell, relaxed_dtypes, name):
    report = _report(shell, name)
    users = {n["label"] for n in report["graphs"]["traced"]["nodes"] if n["kind"] == "param"}
    for which in ("compiled", "gradient_compiled"):
        params = [n for n in report["graphs"][which]["nodes"] if n["kind"] == "param"]
        assert params and {n["label"] for n in params} <= users, (which, params[:3])
        assert all(n.get("hlo") and n["hlo"] != n["label"] for n in params)  # XLA's kept
    # and so they read on the kernels that use them
    _pg, scene = graph_scene(report["graphs"]["compiled"], report)
    text = " ".join(t for b in scene.boxes.values() for t in b.lines)
    assert "__" not in text.replace("__call__", ""), text


def test_module_frames_say_their_class(shell, relaxed_dtypes):
    nnx = _report(shell, "nnx")
    assert nnx["module_classes"]["Transformer/blocks_0"] == "Block"
    for which in ("traced", "gradient_compiled"):
        _pg, scene = graph_scene(nnx["graphs"][which], nnx)
        boxes = {b.group.label: b for b in scene.boxes.values() if b.group is not None}
        assert boxes["blocks_0"].lines[1].startswith("Block · "), boxes["blocks_0"].lines
        assert "Transformer · module · " in boxes["Transformer"].title, boxes["Transformer"].title
        if which == "gradient_compiled":
            assert boxes["blocks_0 (backward)"].lines[1].startswith("Block · ")
    eqx = _report(shell, "equinox")
    _pg, scene = graph_scene(eqx["graphs"]["traced"], eqx)
    boxes = {b.group.label: b for b in scene.boxes.values() if b.group is not None}
    assert boxes["layers_0"].lines[1].startswith("Conv2d · ")
    assert boxes["layers_4"].lines[1].startswith("Linear · ")
    mlp = _report(shell, "mlp")  # plain functions: no classes, the frames say function
    assert mlp["module_classes"] == {}


def test_stats_bars_name_the_call_or_module(shell, relaxed_dtypes):
    report = _report(shell, "mlp")
    bars = _pictures(stats_html(report))["nbc-chart-flops"]
    assert "call / module" in bars
    assert len(re.findall(r"mlp#1/layer#\d+", bars)) >= 8
    # the train step's bars: its ten costliest kernels, each by its call (a backward kernel's
    # call is the backward call: ``mlp#1 (backward)/layer#10 (backward)``)
    step = _pictures(stats_html(report, step=True))["nbc-chart-flops"]
    fusions = report["gradient_fusions"]
    top = sorted(fusions, key=lambda f: -(f["flops"] or 0))[:10]
    where = re.findall(r'data-testid="nbc-bar-where">([^<]*)<', step)
    assert where == [fusion_where(f) for f in top] and all("layer#" in w for w in where)
    backward = [f for f in fusions if f.get("phase") == "backward" and f.get("functions")]
    assert backward and all("(backward)" in fusion_where(f) for f in backward)
