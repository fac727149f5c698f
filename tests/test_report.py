"""Report JSON, text summary, DOT export and the display bundle of a real compilation."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nbcompile

from .widgets.fixtures import check_report


def mlp(params, x):
    h = jnp.tanh(x @ params["w1"])
    return jnp.mean(jax.nn.softmax(h @ params["w2"]) ** 2)


@pytest.fixture(scope="module")
def comp():
    rng = np.random.default_rng(0)
    params = {
        "w1": jnp.asarray(rng.normal(size=(8, 16)), jnp.float32),
        "w2": jnp.asarray(rng.normal(size=(16, 4)), jnp.float32),
    }
    return nbcompile.compile(mlp, params, jnp.ones((2, 8), jnp.float32), grad=0)


def test_report_is_json_and_follows_the_schema(comp):
    r = comp.report()
    json.dumps(r)
    assert r["schema"] == "nbcompile.report/1"
    check_report(r)  # the schema's keys, and every id resolves
    assert r["graphs"]["traced"]["nodes"] and r["graphs"]["compiled"]["nodes"]
    assert r["graphs"]["gradient"]["nodes"]
    assert r["gradient"]["backward_ops"] > 0


def test_text_summary_names_the_figures(comp):
    text = repr(comp)
    assert text.startswith("mlp: compiled for cpu")
    assert f"{comp.summary()['kernels']} kernels" in text
    assert "gradient:" in text


def test_dot_export_has_a_node_per_graph_node(comp):
    dot = comp.to_dot("traced")
    n_nodes = len(comp.report()["graphs"]["traced"]["nodes"])
    assert dot.source.count("[label=") >= n_nodes
    assert comp.to_dot("compiled").source.startswith("digraph")
    with pytest.raises(ValueError):
        comp.to_dot("nothing")


def test_display_bundle_sends_the_renderer_once(comp):
    from nbcompile.compilation import Compilation
    from nbcompile.widgets import DisplayState

    state = DisplayState()  # one kernel's: the renderer goes out with its first output only
    shown = Compilation(comp.program, comp.adapted, display=state)
    first = shown._repr_mimebundle_()
    second = shown._repr_mimebundle_()
    other = Compilation(comp.program, comp.adapted, display=state)._repr_mimebundle_()
    assert len(other["text/html"]) < len(first["text/html"]) - 20_000
    fresh = Compilation(comp.program, comp.adapted, display=DisplayState())
    assert len(fresh._repr_mimebundle_()["text/html"]) > len(other["text/html"]) + 20_000
    assert "application/vnd.jupyter.widget-view+json" in first
    assert first["text/plain"] == second["text/plain"]
    assert "data:image/svg+xml;base64," in first["text/html"]
    assert "data:image/svg+xml;base64," in second["text/html"]
    assert len(second["text/html"]) < len(first["text/html"]) - 20_000


def test_report_is_cached_until_the_compilation_changes(comp):
    from nbcompile.compilation import Compilation

    run = Compilation(comp.program, comp.adapted)  # a run of its own, not the shared fixture
    first = run.report()
    assert run.report() is first
    run.add_note("probe")
    second = run.report()
    assert second is not first and "probe" in second["notes"]
    assert run.report() is second
