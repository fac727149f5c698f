"""The analysis split in two parts (no-XLA part first) gives the same results as in one."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

import nbcompile
from nbcompile.analysis import analyse, analyse_ahead

A = np.random.default_rng(0).normal(size=(16, 16)).astype(np.float32)


def model(x):
    m = jnp.asarray(A) @ jnp.asarray(A)  # constant: folded by XLA
    return jnp.tanh(x @ m) * 2.0


def test_analysis_in_two_parts_matches_analysis_in_one():
    c = nbcompile.compile(model, jnp.ones((4, 16), jnp.float32))
    ahead = analyse(c.artifacts(), analyse_ahead(c.artifacts()))
    after = analyse(c.artifacts())
    assert ahead.summary() == after.summary()
    assert [f.to_json() for f in ahead.folded] == [f.to_json() for f in after.folded]
    assert any(f.stage == "xla" and f.folded for f in ahead.folded)
    assert ahead.traced_graph.to_json() == after.traced_graph.to_json()
