"""Per-iteration time of two real loops (issue 43 acceptance): a Flax ``nn.scan`` transformer
and a ``fori_loop`` DDIM sampler. Each iteration is found and the iterations add up to the
loop's measured total within 10 %: no iteration is lost or counted twice."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax import lax

import nbcompile
from nbcompile.measure import profile

pytestmark = pytest.mark.profiler

LAYERS, STEPS = 4, 12


def flax_scan_transformer():
    nn = pytest.importorskip("flax.linen")

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x, _):
            h = nn.LayerNorm()(x)
            x = x + nn.MultiHeadDotProductAttention(num_heads=4, qkv_features=128)(h)
            h = nn.LayerNorm()(x)
            x = x + nn.Dense(128)(nn.gelu(nn.Dense(512)(h)))
            return x, None

    class Transformer(nn.Module):
        @nn.compact
        def __call__(self, x):
            blocks = nn.scan(
                Block,
                variable_axes={"params": 0},
                split_rngs={"params": True},
                length=LAYERS,
            )
            return blocks()(x, None)[0]

    model = Transformer()
    x = jnp.ones((4, 64, 128))
    return model.apply, (model.init(jax.random.key(0), x), x)


def ddim_sample(params, x, alphas):
    def eps(x, t):
        h = jnp.tanh(x @ params["w1"] + t)
        return h @ params["w2"]

    def step(i, x):
        t = STEPS - 1 - i
        a, a_prev = alphas[t], alphas[jnp.maximum(t - 1, 0)]
        e = eps(x, t.astype(jnp.float32) / STEPS)
        x0 = (x - jnp.sqrt(1 - a) * e) / jnp.sqrt(a)
        return jnp.sqrt(a_prev) * x0 + jnp.sqrt(1 - a_prev) * e

    return lax.fori_loop(0, STEPS, step, x)


def ddim():
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    params = {
        "w1": jax.random.normal(k1, (256, 512)) * 0.05,
        "w2": jax.random.normal(k2, (512, 256)) * 0.05,
    }
    alphas = jnp.linspace(0.99, 0.1, STEPS)
    return ddim_sample, (params, jax.random.normal(k3, (128, 256)), alphas)


@pytest.mark.parametrize(
    "model, kind, trips", [(flax_scan_transformer, "scan", LAYERS), (ddim, "fori_loop", STEPS)]
)
def test_iterations_add_up_to_the_loop(model, kind, trips, relaxed_dtypes):
    fn, args = model()
    c = nbcompile.compile(fn, *args)
    (loop,) = c.loops
    assert (loop.kind, loop.trip_count) == (kind, trips) and loop.whiles
    p = profile(c, calls=5)
    (t,) = p.loops
    assert t.note is None and len(t.iterations) == trips, p.text()
    assert all(s > 0 for s in t.iterations)
    assert abs(t.iteration_seconds - t.total_seconds) <= 0.1 * t.total_seconds, p.text()
