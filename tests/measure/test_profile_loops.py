"""``--profile`` inside the loop (issue 43 item 2, SPEC §9.3): seconds per iteration of every
loop, per kernel, and ``layer[k]`` rows for a scan over the user's function.

Structure, not timing: the heavy branch is ~100x the light one (eight 256x256x256 matmuls
against one add), so "iteration 3 is >= 3x the others' median" holds on any machine."""

from __future__ import annotations

import statistics

import jax.numpy as jnp
import pytest
from jax import lax

import nbcompile
from nbcompile.measure import profile

pytestmark = pytest.mark.profiler


def heavy_on_three(x, w):
    def heavy(c):
        for _ in range(8):
            c = jnp.tanh(c @ w)
        return c

    def body(c, i):
        c = lax.cond(i == 3, heavy, lambda c: c + 1.0, c)
        return c, c[0, 0]

    return lax.scan(body, x, jnp.arange(6))


@pytest.fixture(scope="module")
def heavy():
    x = jnp.ones((256, 256)) * 0.01
    c = nbcompile.compile(heavy_on_three, x, jnp.eye(256) * 0.5)
    return c, profile(c, calls=5)


def test_the_heavy_iteration_is_measured_as_heavy(heavy):
    c, p = heavy
    (t,) = p.loops
    # the light iterations are four ~4 µs kernels on a fast machine: the profiler's honest
    # "short iterations" note may then be there (CI saw 4.1 µs per kernel), nothing else
    assert t.loop is c.loops[0], t.loop
    # (a note that came before it would lead; the unrolling note would follow "--bench")
    assert t.note is None or t.note.startswith("short iterations ("), t.note
    assert t.note is None or t.note.endswith("with --bench"), t.note
    assert len(t.iterations) == 6, p.text()
    others = [s for i, s in enumerate(t.iterations) if i != 3]
    assert t.iterations[3] >= 3 * statistics.median(others), p.text()
    assert max(range(6), key=t.iterations.__getitem__) == 3


def test_each_kernel_per_iteration(heavy):
    c, p = heavy
    (t,) = p.loops
    assert set(t.by_kernel) <= set(c.loops[0].body_kernels)
    assert all(len(v) == 6 for v in t.by_kernel.values())
    # the heavy branch's kernels ran in iteration 3 only, the body's own in every iteration
    heavy_only = [k for k, v in t.by_kernel.items() if v[3] > 0 and not any(v[:3] + v[4:])]
    assert heavy_only, t.by_kernel
    own = set(c.loops[0].every_iteration) & set(t.by_kernel)
    assert own and all(all(x > 0 for x in t.by_kernel[k]) for k in own)


def test_the_iterations_add_up_to_the_loop(heavy):
    _, p = heavy
    (t,) = p.loops
    assert t.total_seconds is not None and t.runs == 1.0
    assert abs(t.iteration_seconds - t.total_seconds) <= 0.1 * t.total_seconds, p.text()


def test_the_report_and_text_carry_the_iterations(heavy):
    _, p = heavy
    data = p.to_json()["loops"]
    assert data[0]["loop"] == 0 and len(data[0]["iterations"]) == 6
    assert data[0]["from"] == "measured"
    assert "slowest: iteration 3" in p.text()


def layer(h, w):
    return jnp.tanh(h @ w)


def scan_loss(ws, x):
    def body(h, w):
        return layer(h, w), None

    h, _ = lax.scan(body, x, ws)
    return (h**2).sum()


def test_a_scan_over_layers_gives_layer_rows():
    ws, x = jnp.ones((6, 256, 256)) * 0.01, jnp.ones((64, 256))
    c = nbcompile.compile(scan_loss, ws, x, grad=0)
    p = profile(c.grad, calls=3)
    fwd, bwd = p.loops
    assert len(fwd.iterations) == len(bwd.iterations) == 6, p.text()
    rows = p.by_function
    forward = [f"layer[{k}]" for k in range(6)]
    backward = [f"layer[{k}] (backward)" for k in range(6)]
    assert set(forward + backward) <= set(rows), rows
    assert not any(k.startswith("body#") for k in rows), rows  # given to its iterations
    # the rows share out the body kernels' measured time, no more, no less
    body = set(fwd.loop.body_kernels) | set(bwd.loop.body_kernels)
    fn_kernels = sum(
        k.seconds
        for k in p.kernels
        if k.name in body and k.name in c.grad.analysis.kernel_functions
    )
    assert sum(rows[k] for k in forward + backward) == pytest.approx(fn_kernels, rel=1e-6)
    assert all(rows[k] > 0 for k in forward + backward)


def test_a_loop_xla_unrolled_says_so_and_gives_its_total():
    def f(x, w):
        return lax.scan(lambda c, _: (jnp.tanh(c @ w), None), x, None, length=3, unroll=True)[0]

    c = nbcompile.compile(f, jnp.ones((128, 128)), jnp.eye(128))
    (t,) = profile(c, calls=3).loops
    assert not t.iterations and t.total_seconds and t.total_seconds > 0
    assert "no per-iteration events" in t.note and "unrolled by JAX" in t.note


def test_a_small_loop_gives_its_iterations_or_says_why_not():
    """XLA:CPU (jaxlib 0.12) compiles a small loop into one kernel (a "small call"): then the
    profile says so and gives that kernel's time; where the loop runs as kernels (jaxlib
    0.10.2) every iteration is found, and short ones carry the profiler's own cost in a note."""

    def f(x):
        return lax.scan(lambda c, _: (jnp.tanh(c) * 0.5 + 0.5, None), x, None, length=200)[0]

    c = nbcompile.compile(f, jnp.ones(4096))
    (loop,) = c.loops
    (t,) = profile(c, calls=3, roofline=False).loops
    assert t.total_seconds and t.total_seconds > 0
    if loop.one_kernel is not None:
        assert not t.iterations and "one kernel" in t.note and loop.one_kernel in t.note
        assert any("one kernel" in s for s in loop.changes)
    else:
        assert len(t.iterations) == 200
        assert t.note is None or "short iterations" in t.note
