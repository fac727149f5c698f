"""The whiteboard picture (issue 42; SPEC §8.1) of four models as a user writes them (a plain-JAX
MLP, a Flax NNX transformer, Equinox's CNN, a plain-JAX convnet: tests/ui/whiteboard_models.py),
each compiled by a ``%%compile --grad`` cell, checked on the static picture's scene (the port of
the front end's layout; the browser test tests/ui/test_ui_whiteboard.py checks the widget and the
saved page):

- the first Graph and Compiled pictures draw at most 25 boxes, the user's calls or modules as
  groups, every label legible at the size the view opens them;
- every kernel box of the Compiled tab (the train step's, forward and backward) sits inside the
  groups of the calls and modules its ops came from — read from XLA's op metadata as
  ``Fusion.functions`` / ``Fusion.modules``, not from what the view drew;
- a group box's subtitle is what a whiteboard says of the layer: its output's shape and the
  parameters it reads (``(16, 32) · 1.06K params``), counted from the model's parameter arrays
  (``report.param_args``), not the data it reads, and not a list of its primitives;
- the front end's own layout (Node) draws the same scene, box for box.
"""

from __future__ import annotations

import math
import re

import pytest

from nbcompile.report.graphmodel import ancestors, prepare_graph
from nbcompile.report.scene import build_scene, initial_expansion
from nbcompile.report.svg import graph_scene
from tests.ui.whiteboard_models import BACKWARD, CALLS, MODELS, place_error

from .test_layout_parity import NODE, _check

pytestmark = [
    pytest.mark.filterwarnings("ignore:'.value' access is now deprecated"),
]
_COMPILED: dict[str, dict] = {}


def _report(shell, name: str) -> dict:
    """The report of model ``name``'s ``%%compile --grad`` cell (compiled once per session)."""
    if name not in _COMPILED:
        import nbcompile

        cells, cell = MODELS[name]
        shell.reset(new_session=False)
        for text in cells:
            res = shell.run_cell(text)
            assert res.success, res.error_in_exec
        res = shell.run_cell(cell.replace("%%compile --grad", "%%compile -q --grad"))
        assert res.success, (res.error_before_exec, res.error_in_exec)
        _COMPILED[name] = nbcompile.last().report()
    return _COMPILED[name]


def _groups(scene) -> set[str]:
    return {b.group.label for b in scene.boxes.values() if b.group is not None and b.key != "root"}


@pytest.mark.parametrize("name", list(MODELS))
def test_first_pictures_are_the_users_calls_and_modules(shell, relaxed_dtypes, name):
    report = _report(shell, name)
    for which in ("traced", "gradient_compiled"):
        _pg, scene = graph_scene(report["graphs"][which], report)
        leaves = [b for b in scene.boxes.values() if b.children is None]
        assert len(leaves) <= 25, (which, [b.lines[0] for b in leaves])
    _pg, first = graph_scene(report["graphs"]["traced"], report)
    assert set(CALLS[name]) <= _groups(first), sorted(_groups(first))
    # each call or module a box of its own (not opened into its primitives)
    drawn = {b.group.label: b for b in first.boxes.values() if b.group is not None}
    assert all(drawn[c].children is None for c in CALLS[name])


@pytest.mark.parametrize("name", list(MODELS))
def test_every_kernel_sits_in_the_calls_and_modules_it_came_from(shell, relaxed_dtypes, name):
    report = _report(shell, name)
    graph = report["graphs"]["gradient_compiled"]
    pg = prepare_graph(graph, report)
    scene = build_scene(pg, initial_expansion(pg, 400, 400, 400, False))  # everything open
    by_name = {f["name"]: f for f in report["gradient_fusions"]}
    library = {
        g["label"].removesuffix(BACKWARD)
        for which in ("traced", "gradient")
        for g in report["graphs"][which].get("groups") or []
        if g.get("call") == "library"
    }
    checked = 0
    for box in scene.boxes.values():
        n = box.node
        if n is None or n.get("kind") not in ("fusion", "op") or box.children is not None:
            continue
        holders = [pg.groups[g] for g in ancestors(pg, box.key)]
        inside = [g.label for g in holders if g.kind not in ("chunk", "across")]
        fusion = by_name.get(n.get("label")) or {}
        functions, modules = fusion.get("functions") or [], fusion.get("modules") or []
        if not functions and not modules:
            continue  # no metadata of the user's (an iota, a broadcast): placed by its neighbour
        top = "" in (n.get("scopes") or [])
        error = place_error(n["label"], inside, functions, modules, top, library)
        assert error is None, error
        checked += int(bool(inside))
    assert checked >= 4, checked


# a layer's parameters, by the prefix of their labels (the user's names), per model
LAYER_PARAMS = {
    "mlp": {f"layer#{k}": f"params[{k - 1}][" for k in range(1, 11)},
    "nnx": {f"blocks_{k}": f"model['blocks'][{k}][" for k in range(4)} | {"head": "model['head']["},
    "equinox": {f"layers_{k}": f"model.layers[{k}]." for k in (0, 4, 6, 8)},
    "convnet": {"conv#1": "params['c1']", "conv#2": "params['c2']"},
}
PARAM_ARGS = {"mlp": ["params"], "nnx": ["model"], "equinox": ["model"], "convnet": ["params"]}
SUBTITLE = re.compile(
    r"^(?:(?:\((?:\d+, )*\d+,?\)|scalar)(?: · [\d.]+[KMGT]? params)?|[\d.]+[KMGT]? params)$"
)


def _elements(shape: str) -> int:
    dims = re.search(r"\[([^\]]*)\]", shape).group(1)
    return math.prod(int(d) for d in dims.split(",") if d.strip())


def _fmt(count: int) -> str:
    from nbcompile.report.graphmodel import fmt_num

    return fmt_num(count)


@pytest.mark.parametrize("name", list(MODELS))
def test_group_subtitles_say_shape_and_parameters(shell, relaxed_dtypes, name):
    report = _report(shell, name)
    assert report["param_args"] == PARAM_ARGS[name]
    traced = report["graphs"]["traced"]
    params = [n for n in traced["nodes"] if n["kind"] == "param"]
    want = {
        layer: _fmt(sum(_elements(n["shape"]) for n in params if n["label"].startswith(prefix)))
        for layer, prefix in LAYER_PARAMS[name].items()
    }
    seen = 0
    for which in ("traced", "compiled", "gradient", "gradient_compiled"):
        _pg, scene = graph_scene(report["graphs"][which], report)
        leaves = [b for b in scene.boxes.values() if b.group is not None and b.children is None]
        for box in leaves:
            g, sub = box.group, box.lines[2:3]
            ops = {str(op) for op in g.ops}
            # what the layer is, never its primitives (``custom_jvp_call, jit, max``)
            assert not sub or SUBTITLE.match(sub[0]), (which, g.label, box.lines)
            assert not (set(re.findall(r"[a-z_]+", " ".join(sub))) & ops), (which, box.lines)
            forward = g.label.removesuffix(BACKWARD)
            if forward not in want:
                continue
            seen += 1
            if which in ("compiled", "gradient_compiled"):
                # what its kernels read: XLA may fuse a bias add into the next call's kernel
                assert sub and sub[0].endswith(" params"), (which, box.lines)
                continue
            # a backward group counts its forward twin's parameters
            assert sub and sub[0].startswith("("), (which, box.lines)
            assert sub[0].endswith(f" · {want[forward]} params"), (which, box.lines)
    assert seen >= len(want), seen


def test_a_layer_reading_data_counts_only_its_parameters(shell, relaxed_dtypes):
    """``layer#1`` reads the data ``x`` beside its weights: only the weights are parameters."""
    report = _report(shell, "mlp")
    _pg, scene = graph_scene(report["graphs"]["traced"], report)
    boxes = {b.group.label: b for b in scene.boxes.values() if b.group is not None}
    assert boxes["layer#1"].lines[2] == "(16, 32) · 1.06K params"  # 32 x 32 + 32, not + 16 x 32
    assert boxes["mean"].lines[2] == "scalar"
    # no parameters known (a report without param_args: no model, no --grad): the shape only
    bare = {**report, "param_args": []}
    pg = prepare_graph(bare["graphs"]["traced"], bare)
    scene = build_scene(pg, initial_expansion(pg, 25, 400))
    boxes = {b.group.label: b for b in scene.boxes.values() if b.group is not None}
    assert boxes["layer#1"].lines[2] == "(16, 32)"


@pytest.mark.skipif(NODE is None, reason="Node.js runs the front end's layout")
@pytest.mark.parametrize("name", list(MODELS))
def test_the_front_end_draws_the_same_scenes(shell, relaxed_dtypes, name, tmp_path):
    report = _report(shell, name)
    _check(report, tmp_path, limit=25)
    _check(report, tmp_path, limit=60)


def test_the_loss_tail_faces_its_backward_ops(shell, relaxed_dtypes):
    """The convnet's dense layers and loss are written inline (ops outside any call): the
    Gradient tab still draws two facing columns at the top level, each backward group level with
    its forward group, the loose backward ops in the forward column's rows (no strip), the
    gradients (outputs) in the backward column."""
    report = _report(shell, "convnet")
    _pg, scene = graph_scene(report["graphs"]["gradient"], report)
    root = scene.root
    assert root.mirror is not None
    columns, partner = root.mirror
    rows = root.inner.layer_of
    for back, fwd in partner.items():
        assert rows[back] == rows[fwd], (back, fwd)
    by_key = {c.key: c for c in root.children}
    left = max(by_key[k].x + by_key[k].w for k, col in columns.items() if col == 0)
    loose = [k for k, col in columns.items() if col == 1 and k not in partner]
    assert len(loose) >= 4
    assert {rows[k] for k in loose} <= {rows[k] for k, col in columns.items() if col == 0}
    assert len({rows[k] for k in loose}) >= 3, {k: rows[k] for k in loose}
    assert all(by_key[k].x >= left for k in loose)  # all in the backward column
    outputs = [c.key for c in root.children if c.node is not None and c.node["kind"] == "output"]
    assert sum(columns[k] for k in outputs) >= len(outputs) - 1  # gradients: backward column


def test_a_train_step_opens_its_forward_calls_first(big_report, tmp_path):
    """The 12-layer train step (one Graph view, no facing columns): the forward ``loss_fn``
    opens to its twelve layers while ``transpose(jvp(loss_fn))`` stays one box beside it (the
    level holding both does not fit 25 boxes; the front end draws the same)."""
    pg = prepare_graph(big_report["graphs"]["traced"], big_report)
    expanded = initial_expansion(pg, 25, 400)
    opened = {pg.groups[g].label for g in expanded}
    assert opened == {"train_step", "loss_fn"}, opened
    scene = build_scene(pg, expanded)
    leaves = [b for b in scene.boxes.values() if b.group is not None and b.key.startswith("g:")]
    labels = {b.group.label for b in leaves if b.group.id not in expanded}
    assert {f"layer_{i}" for i in range(12)} | {"transpose(jvp(loss_fn))"} <= labels
    assert len(scene.boxes) <= 25
    if NODE is not None:
        _check(big_report, tmp_path, limit=25)
