"""bench(): eager vs compiled structure (never absolute times)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import pytest

from nbcompile.measure import BenchResult, bench
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


def test_figures_present_with_spread(result):
    for t in (result.eager, result.compiled):
        assert isinstance(t, Timing)
        assert t.samples >= 3
        assert 0 < t.min <= t.q25 <= t.median <= t.q75 <= t.max
        assert t.first > 0
    assert result.compile_seconds > 0 and result.compile_measured
    assert result.speedup == pytest.approx(result.eager.median / result.compiled.median)
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
    assert {"iqr", "q25", "q75", "samples"} <= set(data["compiled"])
    assert "speed-up" in result.text()


def test_progress_reports(result):
    assert result.messages[0] == "bench: compiling" and result.messages[-1] == "bench: done"


def test_why_explains_a_small_speedup():
    p, x = _params()
    r = bench(block, (p, x), max_seconds=0.5)
    # force the figures to a small speed-up: the explanation must name the dot share
    r.compiled = Timing(**{**r.eager.__dict__})
    assert r.speedup == pytest.approx(1.0)
    assert r.why is not None and "dot/conv" in r.why and "%" in r.why
    assert r.break_even_calls is None


def test_given_compiled_and_compile_time_are_used():
    def mlp(x):
        return jnp.tanh(x * 2.0 + 1.0).sum()

    x = jnp.ones((64,), jnp.float32)
    jitted = jax.jit(mlp)
    r = bench(mlp, (x,), compiled=jitted, compile_seconds=0.25, max_seconds=0.5)
    assert r.compile_seconds == 0.25 and not r.compile_measured
    assert r.compiled_kernels is not None and r.eager_kernels >= r.compiled_kernels
    assert r.dot_ops == 0 and r.dot_flop_fraction == 0
