"""analyse_cached: the same program compiled again is not analysed again; what a fresh trace
changes (equation objects, cell numbers) is refreshed; any other program is analysed afresh."""

from __future__ import annotations

import linecache

import jax
import jax.numpy as jnp
import pytest

from nbcompile._compat import persistent_cache_disabled
from nbcompile.analysis import (
    Artifacts,
    analyse,
    analyse_cached,
    clear_analysis_cache,
    fingerprint,
)
from nbcompile.analysis.traced import walk_order
from nbcompile.capture.source import SourceInfo

CELL_FILE = "/tmp/ipykernel_4242/feedbeef0001.py"  # a cell file as ipykernel names them
CELL = """def f(w, x):
    h = jnp.tanh(x @ w)
    return jnp.sum(h * 2.0)
"""


def _function():
    namespace = {"jnp": jnp}
    exec(compile(CELL, CELL_FILE, "exec"), namespace)
    return namespace["f"]


def _artifacts(cells, shape=(2, 4)):
    linecache.cache[CELL_FILE] = (len(CELL), None, CELL.splitlines(True), CELL_FILE)
    fn = _function()  # a fresh function and a fresh trace each time, as on a re-run
    traced = jax.jit(fn).trace(jnp.ones((shape[1], 8)), jnp.ones(shape))
    lowered = traced.lower()
    # XLA compiles each time: an executable from JAX's persistent cache (the suite caches every
    # compile) prints its stack frames in another order, so its HLO text is another program's
    with persistent_cache_disabled():
        compiled = lowered.compile()
    return Artifacts(
        closed_jaxpr=traced.jaxpr,
        lowered=lowered,
        compiled=compiled,
        hlo_text=compiled.as_text(),
        source=SourceInfo(cells=cells),
        name="f",
        fn=fn,
    )


@pytest.fixture(autouse=True)
def _fresh():
    clear_analysis_cache()
    yield
    clear_analysis_cache()


def test_same_program_again_is_a_hit_with_this_traces_equations():
    cells = {CELL_FILE: 3}
    # built at one call site: the HLO's source stacks include the caller's frames
    before, again = [_artifacts(cells) for _ in range(2)]
    first = analyse_cached(before)
    second = analyse_cached(again)
    assert "analyse.cache_hit" in second.timings and "analyse.traced" in first.timings
    assert second.fingerprint == first.fingerprint == fingerprint(again)
    assert second.to_json() == first.to_json()
    eqns = walk_order(again.closed_jaxpr)
    assert set(second.traced_graph.eqn_nodes) == {id(e) for e in eqns}
    for eqn in eqns:  # each equation of the new trace maps to the node made for it
        node = second.traced_graph.node(second.traced_graph.eqn_nodes[id(eqn)])
        assert node.op == eqn.primitive.name
    assert first.traced_graph.eqn_nodes is not second.traced_graph.eqn_nodes


def test_walk_order_is_the_order_nodes_were_made():
    art = _artifacts({CELL_FILE: 3})
    fresh = analyse(art)
    order = [fresh.traced_graph.eqn_nodes[id(e)] for e in walk_order(art.closed_jaxpr)]
    assert order == fresh.walk_order


def test_a_rerun_cell_gets_its_new_number_on_a_hit():
    cells = {CELL_FILE: 3}
    before, after = [_artifacts(cells) for _ in range(2)]
    first = analyse_cached(before)
    assert {loc.label for f in first.fusions for loc in f.locations} <= {
        "In [3] line 2",
        "In [3] line 3",
    }
    cells[CELL_FILE] = 7  # the same cell run again: ipykernel keeps its file name
    second = analyse_cached(after)
    assert "analyse.cache_hit" in second.timings
    labels = {loc.label for f in second.fusions for loc in f.locations}
    assert labels and all(label.startswith("In [7] line ") for label in labels)
    assert all(key.startswith("In [7]") for key in second.lines_json())
    assert [s["label"] for s in second.sources] == ["In [7]"]
    assert {n.location.cell for n in second.traced_graph.nodes if n.location} == {7}


def test_another_program_is_analysed_afresh():
    first, other = (
        analyse_cached(_artifacts({CELL_FILE: 3}, shape=shape)) for shape in ((2, 4), (3, 4))
    )
    assert "analyse.cache_hit" not in other.timings
    assert other.fingerprint != first.fingerprint
