"""Every figure says where it came from (XLA / measured / estimate / spec): a walk over every
figure of the analysis JSON and of the report of several compiles (CPU, CPU with --grad,
deviceless TPU, StableHLO-only GPU) fails on an unlabelled one. Where XLA reports no cost, the
flops shown are nbcompile's own count, labelled an estimate in the JSON and in the HTML.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import nbcompile
from nbcompile.analysis import unlabelled
from nbcompile.analysis.provenance import label_of
from nbcompile.report.html import render_html


def loss(w, x):
    return jnp.sum(jnp.tanh(x @ w) * 2.0)


ARGS = (jnp.ones((4, 8)), jnp.ones((2, 4)))
COMPILES = {
    "cpu": {},
    "cpu grad": {"grad": True},
    "tpu deviceless": {"backend": "tpu", "topology": "v5e:2x2"},
    "gpu lowered only": {"backend": "gpu"},
}


@pytest.fixture(scope="module", params=list(COMPILES))
def compiled(request):
    return request.param, nbcompile.compile(loss, *ARGS, **COMPILES[request.param])


def test_walker_finds_unlabelled_figures():
    assert unlabelled({"flops": 1.0}) == ["$.flops"]
    assert unlabelled({"flops": 1.0, "from": {"flops": "guess"}}) == ["$.flops"]
    assert unlabelled({"a": [{"bytes": 3}], "from": "XLA"}) == []
    assert unlabelled({"timings": {"trace": 0.1}}) == ["$.timings.trace"]
    assert unlabelled({"timings": {"trace": 0.1}, "from": {"timings": "measured"}}) == []
    assert (
        unlabelled(
            {
                "graph": {
                    "nodes": [{"flops": 2.0, "from": {"flops": "XLA"}}],
                    "from": {"flops": "estimate"},
                }
            }
        )
        == []
    )
    assert unlabelled({"kernels": 12, "line": 3, "shape": "f32[2]"}) == []  # structure
    assert label_of("bytes", {"*": "XLA"}) == "XLA"


def test_every_figure_of_the_analysis_is_labelled(compiled):
    kind, c = compiled
    document = c.analysis.to_json()
    assert unlabelled(document) == [], kind
    if c.grad is not None:
        assert unlabelled(c.grad.analysis.to_json()) == []
    assert document["summary"]["flops"] is not None  # something is shown, and labelled


def test_every_figure_of_the_report_is_labelled(compiled):
    _, c = compiled
    assert unlabelled(c.report()) == []


def test_flops_without_xla_cost_are_an_estimate_everywhere():
    c = nbcompile.compile(loss, *ARGS, backend="gpu")
    assert c.compiled is None and c.cost is None  # StableHLO only: XLA reports no cost
    summary = c.analysis.summary()
    assert summary["flops"] == c.analysis.analytic["flops"] > 0
    assert summary["from"]["flops"] == "estimate"
    html = render_html(c.report())
    assert "flops (estimate)" in html
    xla = nbcompile.compile(loss, *ARGS)
    assert xla.analysis.summary()["from"]["flops"] == "XLA"
    assert "flops (XLA)" in render_html(xla.report())


def test_scalar_rng_ops_on_tpu_are_counted_apart():
    key = jax.random.key(0)

    def dropout(w, x, key):
        h = jnp.tanh(x @ w)
        for _ in range(3):  # three streams, as three Dropout layers fold in their keys
            key, sub = jax.random.split(key)
            h = jnp.where(jax.random.bernoulli(sub, 0.9, h.shape), h / 0.9, 0.0)
        return h

    c = nbcompile.compile(dropout, *ARGS, key, backend="tpu", topology="v5e:2x2")
    counts = c.analysis.counts
    assert 0 < counts["scalar_kernels"] < counts["kernels"]
    assert any("scalar-unit" in note for note in c.analysis.notes)
    cpu = nbcompile.compile(dropout, *ARGS, key)
    assert not any("scalar-unit" in note for note in cpu.analysis.notes)


def test_a_figure_xla_does_not_give_stays_missing_with_a_note(monkeypatch):
    """JAX returns None for an analysis a backend cannot give: the figure stays None (shown as
    "not reported"), a note says so, and nothing else of the analysis is lost."""
    import jax

    monkeypatch.setattr(jax.stages.Compiled, "cost_analysis", lambda self: None)
    monkeypatch.setattr(jax.stages.Compiled, "memory_analysis", lambda self: None)

    def not_seen_before(w, x):  # the analysis of a program compiled before is reused as is
        return jnp.mean(jnp.tanh(x @ w) * 0.75)

    c = nbcompile.compile(not_seen_before, *ARGS)
    notes = c.analysis.notes
    assert any("no cost analysis" in n for n in notes), notes
    assert any("no memory analysis" in n for n in notes), notes
    assert c.memory is None and c.fusions  # the rest of the analysis is intact
    assert c.cost is None or c.cost.get("estimate") == "static"  # labelled, never XLA's
    assert "not reported" in repr(c) or "estimate" in repr(c)
