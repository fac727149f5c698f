"""bench(): the ordinary eager call vs compiled, op-by-op beside it; structure, not absolute times
(one ratio test compares bench's eager figure with an eager call timed here, 2× apart at most)."""

from __future__ import annotations

import json
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from nbcompile.measure import BenchResult, bench
from nbcompile.measure._eager import eager_dispatches
from nbcompile.measure._timing import Timing

D = 32


def block(p, x):
    q, k, v = x @ p["wq"], x @ p["wk"], x @ p["wv"]
    att = jax.nn.softmax(q @ k.T / 8.0, axis=-1) @ v
    y = x + att @ p["wo"]
    mu = y.mean(-1, keepdims=True)
    var = ((y - mu) ** 2).mean(-1, keepdims=True)
    y = (y - mu) / jnp.sqrt(var + 1e-5)
    return y + jax.nn.gelu(y @ p["w1"]) @ p["w2"]


def _params():
    keys = jax.random.split(jax.random.key(0), 7)
    names = ["wq", "wk", "wv", "wo", "w1", "w2"]
    p = {n: jax.random.normal(k, (D, D)) * 0.1 for n, k in zip(names, keys, strict=False)}
    return p, jax.random.normal(keys[6], (16, D))


@jax.jit
def _library(x):
    """A library function that is itself jitted: one dispatch eagerly, 60 primitives op by op."""
    for _ in range(30):
        x = jnp.sin(x) * 1.01
    return x


def uses_library(x):
    return _library(x) + 1.0


@pytest.fixture(scope="module")
def result() -> BenchResult:
    p, x = _params()
    messages: list[str] = []
    r = bench(block, (p, x), max_seconds=2.0, progress=messages.append)
    r.messages = messages  # for the progress test
    return r


def test_eager_dispatches_more_kernels_than_compiled(result):
    assert result.compiled_kernels is not None and result.compiled_kernels > 0
    assert result.eager_kernels > result.compiled_kernels
    assert result.eager_kernels_exact and result.op_by_op_exact


def test_figures_present_with_spread(result):
    for t in (result.eager, result.compiled, result.op_by_op, result.dispatch):
        assert isinstance(t, Timing)
        assert t.samples >= 3
        assert 0 < t.min <= t.q25 <= t.median <= t.q75 <= t.max
        assert t.first > 0
    assert result.compile_seconds > 0 and result.compile_measured
    assert result.speedup == pytest.approx(result.eager.median / result.compiled.median)
    assert result.op_by_op_speedup == pytest.approx(result.op_by_op.median / result.compiled.median)
    share = result.eager_kernels * result.dispatch.median / result.eager.median
    assert result.dispatch_share == pytest.approx(min(1.0, share))
    if result.eager.median > result.compiled.median:
        n = result.break_even_calls
        gain = result.eager.median - result.compiled.median
        # n is the smallest call count at which compile time is recovered
        assert n * gain >= result.compile_seconds > (n - 1) * gain
    else:
        assert result.break_even_calls is None


def test_dot_share_is_measured(result):
    # 8 matmuls in the block (4 projections, 2 attention products, 2 MLP)
    assert result.dot_ops == 8
    assert 0 < result.dot_flop_fraction < 1


def test_json_round_trip_and_text(result):
    data = json.loads(json.dumps(result.to_json()))
    assert data["eager"]["median"] == result.eager.median
    assert data["eager_kernels"] == result.eager_kernels
    assert data["op_by_op"]["median"] == result.op_by_op.median
    assert {"iqr", "q25", "q75", "samples"} <= set(data["compiled"])
    text = result.text()
    assert "speed-up" in text and "ordinary call" in text and "jax.disable_jit" in text
    assert "per eager op (measured)" in text and "None" not in text


def test_progress_reports(result):
    assert result.messages[0] == "bench: compiling" and result.messages[-1] == "bench: done"


def test_eager_is_the_ordinary_call_not_disable_jit():
    """A jitted library function is one dispatch in an ordinary call but 60 primitives under
    jax.disable_jit(): bench's eager figure must be the ordinary call's (timed here, interleaved
    with bench, within 2×), and op by op must be reported apart from it."""
    x = jnp.ones((64,), jnp.float32)
    jax.block_until_ready(uses_library(x))

    def ordinary() -> float:
        samples = []
        for _ in range(15):
            t0 = time.perf_counter()
            for _ in range(20):
                jax.block_until_ready(uses_library(x))
            samples.append((time.perf_counter() - t0) / 20)
        return statistics.median(samples)

    before = ordinary()
    r = bench(uses_library, (x,), max_seconds=1.5)
    after = ordinary()
    assert r.eager_kernels == 2 and r.op_by_op_kernels == 61
    assert min(before, after) / 2 < r.eager.median < 2 * max(before, after), (
        before,
        r.eager.median,
        after,
    )
    assert r.op_by_op.median > r.eager.median  # 61 dispatches against 2


def test_eager_dispatch_count_follows_jax_eager_rules():
    """Nested jit, scan, while and cond run whole; custom_jvp (relu) is opened to its jit."""

    def fn(x):
        y = _library(x) + 1.0  # 2
        y = jax.nn.relu(y)  # custom_jvp -> jit: 1
        y = jax.lax.fori_loop(0, 3, lambda i, h: h * 2.0, y)  # scan: 1
        y = jax.lax.while_loop(lambda h: h.sum() < 1e3, lambda h: h * 2.0, y)  # 1
        return jax.lax.cond(y.sum() > 0, lambda a: a * 2.0, lambda a: a - 1.0, y)

    x = jnp.ones((8,), jnp.float32)
    closed = jax.make_jaxpr(fn)(x)
    n, exact = eager_dispatches(closed)
    names = [e.primitive.name for e in closed.jaxpr.eqns]
    # the cond's predicate adds reduce_sum, gt and convert_element_type: 4 dispatches
    assert names == [
        "jit",
        "add",
        "custom_jvp_call",
        "scan",
        "while",
        "reduce_sum",
        "gt",
        "convert_element_type",
        "cond",
    ], names
    assert exact and n == 2 + 1 + 1 + 1 + 4 == len(names)


def test_a_shard_map_program_counts_at_least_and_never_none():
    mesh = Mesh(np.array(jax.devices()[:1]), ("x",))

    def per_shard(a):
        return jax.lax.psum(jnp.sin(a) * 2.0, "x")

    def program(a):
        return jax.shard_map(per_shard, mesh=mesh, in_specs=P("x"), out_specs=P())(a) + 1.0

    a = jnp.arange(8.0)
    r = bench(program, (a,), max_seconds=0.6)
    assert not r.eager_kernels_exact and not r.op_by_op_exact
    assert r.eager_kernels >= 2 and r.op_by_op_kernels >= 2
    text = r.text()
    assert "at least" in text and "None" not in text
    assert any("shard_map" in n and "lower bounds" in n for n in r.notes), r.notes
    r.compiled = Timing(**{**r.eager.__dict__})  # a small speed-up: the why must not use the bound
    assert "only 2 op(s)" not in r.why and "at least" in r.why


def test_why_explains_a_small_speedup():
    p, x = _params()
    r = bench(block, (p, x), max_seconds=0.5, op_by_op=False)
    assert r.op_by_op is None and r.op_by_op_speedup is None
    # force the figures to a small speed-up: the explanation must name the dot share
    r.compiled = Timing(**{**r.eager.__dict__})
    assert r.speedup == pytest.approx(1.0)
    assert r.why is not None and "dot/conv" in r.why and "%" in r.why
    assert r.break_even_calls is None


def test_given_compiled_hlo_and_compile_time_are_used():
    def mlp(x):
        return jnp.tanh(x * 2.0 + 1.0).sum()

    x = jnp.ones((64,), jnp.float32)
    jitted = jax.jit(mlp)
    hlo = jitted.lower(x).compile().as_text()
    r = bench(mlp, (x,), compiled=jitted, compile_seconds=0.25, hlo=hlo, max_seconds=0.5)
    assert r.compile_seconds == 0.25 and not r.compile_measured
    assert r.compiled_kernels is not None and r.eager_kernels >= r.compiled_kernels
    assert r.dot_ops == 0 and r.dot_flop_fraction == 0


def test_a_jitted_function_is_said_to_run_compiled_eagerly():
    r = bench(_library, (jnp.ones((8,), jnp.float32),), max_seconds=0.3, op_by_op=False)
    assert r.eager_kernels == 1 and any("itself jitted" in n for n in r.notes)
