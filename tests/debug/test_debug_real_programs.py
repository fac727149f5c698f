"""--debug on what real models contain (issue 14 §6): attention masks that are one huge constant
(``finfo(float32).min`` in Flax's attention, Gemma's ``K_MASK = -2.3819763e38``), and
``jax.jit(jax.shard_map(...))`` as in JAX's shard_map guide."""

from __future__ import annotations

import itertools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from nbcompile.debug import debug_run, summarise

GEMMA_K_MASK = -2.3819763e38


def assert_valid_hist(summary: dict, count: int) -> None:
    edges, counts = summary["hist"]["edges"], summary["hist"]["counts"]
    assert len(edges) == len(counts) + 1 and sum(counts) == count
    assert all(a < b for a, b in itertools.pairwise(edges)), edges
    assert edges[0] <= summary["min"] <= summary["max"] <= edges[-1]
    json.dumps(summary, allow_nan=False)  # the view reads it as JSON


@pytest.mark.parametrize(
    "value",
    [
        float(jnp.finfo(jnp.float32).min),
        GEMMA_K_MASK,
        float(jnp.finfo(jnp.float32).max),
        1e30,
        0.0,
        1.0,
    ],
)
def test_summary_of_one_value_repeated(value):
    s = summarise(jnp.full((4, 8), value, jnp.float32))
    assert s["min"] == s["max"] == pytest.approx(value)
    assert_valid_hist(s, 32)


def test_summary_of_values_too_close_for_their_magnitude_and_too_far_for_float64():
    assert_valid_hist(summarise(np.array([1e30, 1e30 + 1e15, 1e30])), 3)
    s = summarise(np.array([-1.7e308, 1.7e308]))  # hi - lo overflows float64
    assert_valid_hist(s, 2)
    assert s["hist"]["counts"][0] == s["hist"]["counts"][-1] == 1 and s["mean"] == 0.0
    s = summarise(np.array([1.7e308, 1.7e308, 1.7e308]))  # the sum overflows, the mean not
    assert s["mean"] == pytest.approx(1.7e308)


def test_summary_keeps_the_resolution_of_small_values():
    s = summarise(np.array([0.0, 1e-7, 2e-7]))
    assert s["hist"]["edges"][0] == 0.0 and s["hist"]["edges"][-1] == pytest.approx(2e-7)
    assert s["hist"]["counts"][0] == 1 and s["hist"]["counts"][-1] == 1


def masked_attention(q, k, mask):
    """Gemma's masking: logits where the mask holds, K_MASK elsewhere."""
    logits = jnp.einsum("qd,kd->qk", q, k)
    logits = jnp.where(mask, logits, GEMMA_K_MASK)
    return jax.nn.softmax(logits, axis=-1)


def test_debug_runs_through_an_attention_mask_constant():
    q = jax.random.normal(jax.random.key(0), (4, 8))
    k = jax.random.normal(jax.random.key(1), (4, 8))
    mask = jnp.tril(jnp.ones((4, 4), bool))
    closed = jax.make_jaxpr(masked_attention)(q, k, mask)
    d = debug_run(closed, (q, k, mask))
    assert not d.stopped
    np.testing.assert_allclose(
        np.asarray(d.outputs[0]), masked_attention(q, k, mask), rtol=1e-6, atol=1e-6
    )
    constants = [
        s
        for s in d.summaries.values()
        for o in s["outputs"]
        if o["min"] == o["max"] == pytest.approx(GEMMA_K_MASK)
    ]
    assert constants, "the broadcast mask constant has a summary"


def test_debug_on_a_flax_attention_cell(shell, relaxed_dtypes):
    """Flax's attention masks with jnp.finfo(dtype).min: %%compile --debug must run through."""
    shell.reset(new_session=False)
    res = shell.run_cell("""
import jax, jax.numpy as jnp
import flax.linen as nn
attn = nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=8)
x = jax.random.normal(jax.random.key(0), (1, 5, 8))
mask = nn.make_causal_mask(jnp.ones((1, 5)))
variables = attn.init(jax.random.key(1), x, mask=mask)
""")
    assert res.success, res.error_in_exec
    res = shell.run_cell("%%compile -q --debug\nattn.apply(variables, x, mask=mask)\n")
    assert res.success, res.error_in_exec
    import nbcompile

    d = nbcompile.last().debug
    assert d is not None and not d.stopped and d.outputs is not None
    big = float(jnp.finfo(jnp.float32).min)
    assert any(o["min"] == big for s in d.summaries.values() for o in s["outputs"])


def test_debug_runs_a_shard_map_program():
    """The shard_map guide's pattern under jax.jit: the shard_map is run as one op (its body
    runs per device, with collectives), with a note, and the outputs are the program's."""
    mesh = Mesh(np.array(jax.devices()[:1]), ("x",))

    def per_shard(a):
        return jax.lax.psum(jnp.sin(a), "x")

    fn = jax.jit(jax.shard_map(per_shard, mesh=mesh, in_specs=P("x"), out_specs=P()))
    a = jnp.arange(8.0)
    closed = jax.make_jaxpr(fn)(a)
    d = debug_run(closed, (a,))
    assert not d.stopped
    np.testing.assert_allclose(np.asarray(d.outputs[0]), np.asarray(fn(a)), rtol=1e-6)
    assert any("shard_map" in note and "one op" in note for note in d.notes), d.notes
