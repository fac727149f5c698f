"""``c.loops`` (issue 43 item 1, SPEC §9.3): every scan / fori_loop / while_loop / map of the
program, named by the function the user called and the line that called it, matched to the XLA
``while`` it became, with what JAX's lowering or XLA did to it."""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import pytest
from jax import lax

import nbcompile
from nbcompile.analysis import parse_hlo
from nbcompile.analysis.compiled import FREE_OPS
from nbcompile.analysis.loops import Loop


def _line(fn, marker: str) -> int:
    """The line of this file holding ``marker`` inside ``fn``."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, text in enumerate(lines) if marker in text)


def step(c, w):
    return jnp.tanh(c @ w)


def every_kind(x, w):
    def body(c, i):
        c = lax.cond(i == 3, lambda c: jnp.tanh(c @ w) * 2, lambda c: c + 1, c)
        return c, c.sum()

    c, ys = lax.scan(body, x, jnp.arange(6))  # SCAN
    c = lax.fori_loop(0, 5, lambda i, c: step(c, w), c)  # FORI
    n = jnp.int32(c[0, 0] > 0) + 2
    c = lax.fori_loop(0, n, lambda i, c: c * 0.5, c)  # DYNAMIC
    c = lax.while_loop(lambda c: c.sum() < 1e3, lambda c: c + 1, c)  # WHILE
    c = lax.map(lambda r: r * 2, c)  # MAP

    def outer(c, _):
        return lax.fori_loop(0, 3, lambda i, d: d * 0.5 + 1, c), None  # INNER

    c, _ = lax.scan(outer, c, None, length=4)  # OUTER
    return c, ys


@pytest.fixture(scope="module")
def kinds():
    x, w = jnp.ones((16, 16)) * 0.01, jnp.eye(16)
    return nbcompile.compile(every_kind, x, w)


def test_every_loop_is_named_by_what_the_user_called(kinds):
    loops = kinds.loops
    assert [lp.kind for lp in loops] == [
        "scan",
        "fori_loop",
        "fori_loop",
        "while_loop",
        "map",
        "scan",
        "fori_loop",
    ]
    marks = ["# SCAN", "# FORI", "# DYNAMIC", "# WHILE", "# MAP", "# OUTER", "# INNER"]
    assert [lp.location.line for lp in loops] == [_line(every_kind, m) for m in marks]
    assert [lp.trip_count for lp in loops] == [6, 5, None, None, 16, 4, 3]
    assert loops[0].trip_count_from == "traced" and loops[2].trip_count_from is None
    assert loops[0].label.startswith("scan × 6 · ")
    assert loops[2].label.startswith("fori_loop × ? · ")


def test_loops_are_matched_to_xla_whiles_with_their_body_kernels(kinds):
    graph = kinds.analysis.compiled_graph
    kernels = {
        k.label
        for k in graph.nodes
        if k.kind in ("op", "fusion") and k.extra["opcode"] not in FREE_OPS
    }
    whiles = [w for lp in kinds.loops for w in lp.whiles]
    assert len(whiles) == len(set(whiles)) == 7, [lp.whiles for lp in kinds.loops]
    module = parse_hlo(kinds.hlo)
    instrs = [i for comp in module.computations.values() for i in comp.instructions]
    hlo_whiles = {i.name for i in instrs if i.opcode == "while"}
    assert set(whiles) == hlo_whiles
    for lp in kinds.loops:
        assert lp.body_kernels and set(lp.body_kernels) <= kernels, lp
        assert lp.xla_trip_count == lp.trip_count or lp.trip_count is None
    # the scan's body holds the cond: the kernels of both its branches run inside the loop
    (cond,) = [i for i in instrs if i.opcode == "conditional"]
    branches = {
        i.name
        for name in cond.called
        for i in module.computations[name].instructions
        if i.name in kernels
    }
    assert branches and branches <= set(kinds.loops[0].body_kernels)


def test_nested_loops_and_call_groups(kinds):
    outer, inner = kinds.loops[5], kinds.loops[6]
    assert outer.nested == [inner] and inner.parent == outer.index
    assert set(inner.body_kernels) < set(outer.body_kernels)
    assert outer.group is None
    # the inner fori_loop sits in the user's function ``outer`` (its call group), not in the
    # library call ``fori_loop`` that made it
    assert inner.group is not None and inner.group.startswith("outer#")
    assert all(not lp.nested for lp in kinds.loops[:5])


def test_the_traced_graph_knows_each_loop_body(kinds):
    graph = kinds.analysis.traced_graph
    groups = {g.id: g for g in graph.groups}
    for lp in kinds.loops:
        node = graph.node(lp.node)
        assert node is not None and node.op in ("scan", "while")
        assert groups[lp.body_group].kind == "loop"
    compiled = {g.id: g for g in kinds.analysis.compiled_graph.groups}
    assert all(
        lp.compiled_groups and compiled[g].kind == "loop"
        for lp in kinds.loops
        for g in lp.compiled_groups
    )


def test_the_report_carries_the_loops(kinds):
    data = kinds.analysis.to_json()["loops"]
    assert [d["kind"] for d in data] == [lp.kind for lp in kinds.loops]
    assert data[0]["trip_count"] == 6 and data[0]["from"]["trip_count"] == "traced"
    assert data[5]["nested"] == [6] and data[6]["parent"] == 5


def unrolled(x, w):
    a, _ = lax.scan(lambda c, _: (jnp.tanh(c @ w), None), x, None, length=4, unroll=True)  # ALL
    b, _ = lax.scan(lambda c, _: (jnp.tanh(c @ w), None), a, None, length=8, unroll=2)  # TWO

    def body(c, _):
        invariant = jnp.exp(w) @ w  # HOISTED
        return c @ invariant, None

    d, _ = lax.scan(body, b, None, length=5)
    return d


def test_what_jax_and_xla_did_is_said():
    c = nbcompile.compile(unrolled, jnp.ones((16, 16)), jnp.eye(16))
    full, two, hoist = c.loops
    assert not full.whiles and full.unrolled
    assert any("unrolled by JAX (unroll=4)" in s for s in full.changes), full.changes
    assert full.body_kernels  # its four copies run inline, from its line alone
    assert two.whiles and two.xla_trip_count == 4 and two.trip_count == 8
    assert any("unrolled ×2 by JAX" in s for s in two.changes), two.changes
    said = [s for s in hoist.changes if "hoisted" in s]
    assert said, hoist.changes
    hoisted = said[0].split(": ", 1)[1].split(", ")
    assert not set(hoisted) & set(hoist.body_kernels)


def layer(h, w):
    return jnp.tanh(h @ w)


def scan_loss(ws, x):
    def body(h, w):
        return layer(h, w), None

    h, _ = lax.scan(body, x, ws)  # LAYERS
    return (h**2).sum()


def test_a_gradient_has_a_reverse_scan_facing_its_forward():
    c = nbcompile.compile(scan_loss, jnp.ones((6, 32, 32)) * 0.01, jnp.ones((8, 32)), grad=0)
    assert [lp.kind for lp in c.loops] == ["scan"] and c.loops[0].phase is None
    fwd, bwd = c.grad.loops
    line = _line(scan_loss, "# LAYERS")
    assert fwd.location.line == bwd.location.line == line
    assert (fwd.phase, fwd.reverse) == ("forward", False)
    assert (bwd.phase, bwd.reverse) == ("backward", True)
    assert fwd.trip_count == bwd.trip_count == 6
    assert fwd.whiles and bwd.whiles and not set(fwd.body_kernels) & set(bwd.body_kernels)
    assert bwd.label.endswith("(backward)")


def test_a_flax_nn_scan_is_a_scan(relaxed_dtypes):
    nn = pytest.importorskip("flax.linen")

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x, _):
            return nn.Dense(16)(x), None

    class Stack(nn.Module):
        @nn.compact
        def __call__(self, x):
            scanned = nn.scan(
                Block, variable_axes={"params": 0}, split_rngs={"params": True}, length=3
            )
            return scanned()(x, None)[0]

    model = Stack()
    params = model.init(jax.random.key(0), jnp.ones((4, 16)))
    c = nbcompile.compile(model.apply, params, jnp.ones((4, 16)))
    (loop,) = c.loops
    assert isinstance(loop, Loop)
    assert (loop.kind, loop.trip_count) == ("scan", 3) and loop.whiles and loop.body_kernels
    assert loop.location is not None and loop.location.file == __file__


def test_a_program_without_loops_has_none():
    c = nbcompile.compile(lambda x: jnp.tanh(x) * 2, jnp.ones(4))
    assert c.loops == [] and c.analysis.to_json()["loops"] == []
