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
- the front end's own layout (Node) draws the same scene, box for box.
"""

from __future__ import annotations

import pytest

from nbcompile.report.graphmodel import ancestors, prepare_graph
from nbcompile.report.scene import build_scene, initial_expansion
from nbcompile.report.svg import graph_scene
from tests.ui.whiteboard_models import CALLS, MODELS

from .test_layout_parity import NODE, _check

pytestmark = [
    pytest.mark.filterwarnings("ignore:'.value' access is now deprecated"),
]
BACKWARD = " (backward)"
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


def _cut(path: str, library: set[str]) -> list[str]:
    """A call path's labels down to the first library call (``gelu``: drawn as a kernel's name)."""
    out = []
    for label in (c for c in path.split("/") if c):
        if label.removesuffix(BACKWARD) in library:
            break
        out.append(label)
    return out


def _modules(inside: list[str]) -> list[str]:
    """The module groups of a box's holders, a backward group read as its module's."""
    got = [g.removesuffix(BACKWARD) for g in inside if "#" not in g]
    return [g for g in got if not g.startswith("outside your calls")]


def _common(paths: list[list[str]]) -> list[str]:
    out = []
    for parts in zip(*paths, strict=False):
        if any(p != parts[0] for p in parts):
            break
        out.append(parts[0])
    return out


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
        # the user's calls: the common prefix of the kernel's call paths (XLA's op metadata),
        # a forward call fused into a backward kernel read as its backward twin
        calls = [_cut(p, library) for p in fusion.get("functions") or []]
        if any(c.endswith(BACKWARD) for p in calls for c in p):
            calls = [[c if c.endswith(BACKWARD) else c + BACKWARD for c in p] for p in calls]
        modules = [[m for m in p.split("/") if m] for p in fusion.get("modules") or []]
        if not calls and not modules:
            continue  # no metadata of the user's (an iota, a broadcast): placed by its neighbour
        # inside every group all its ops share, and only in groups holding one of its ops (XLA
        # merges equal constants of several calls into one named after the first: a kernel's
        # metadata may name a call it took only a constant from)
        for got, paths in (([g for g in inside if "#" in g], calls), (_modules(inside), modules)):
            if not paths:
                assert not got, (n["label"], inside)
                continue
            # (an op of the top level, outside every module: the kernel sits there)
            want = [] if "" in (n.get("scopes") or []) else _common(paths)
            assert got[: len(want)] == want, (n["label"], inside, paths)
            assert any(p[: len(got)] == got for p in paths), (n["label"], inside, paths)
        if inside:
            checked += 1
    assert checked >= 4, checked


@pytest.mark.skipif(NODE is None, reason="Node.js runs the front end's layout")
@pytest.mark.parametrize("name", list(MODELS))
def test_the_front_end_draws_the_same_scenes(shell, relaxed_dtypes, name, tmp_path):
    report = _report(shell, name)
    _check(report, tmp_path, limit=25)
    _check(report, tmp_path, limit=60)
