"""The analysis that runs while XLA compiles gives the same results as running it after."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

import nbcompile
from nbcompile._compat import pre_optimisation_hlo_job
from nbcompile.analysis import analyse

A = np.random.default_rng(0).normal(size=(16, 16)).astype(np.float32)


def model(x):
    m = jnp.asarray(A) @ jnp.asarray(A)  # constant: folded by XLA
    return jnp.tanh(x @ m) * 2.0


def test_ahead_analysis_matches_analysis_after_compile():
    c = nbcompile.compile(model, jnp.ones((4, 16), jnp.float32))
    assert c._ahead is not None, "nbcompile.compile did not start the analysis ahead"
    ahead = c.analysis
    after = analyse(c.artifacts())
    assert ahead.summary() == after.summary()
    assert [f.to_json() for f in ahead.folded] == [f.to_json() for f in after.folded]
    assert any(f.stage == "xla" and f.folded for f in ahead.folded)
    assert ahead.traced_graph.to_json() == after.traced_graph.to_json()


def test_thread_safe_pre_optimisation_job_equals_compiler_ir():
    lowered = __import__("jax").jit(model).lower(jnp.ones((4, 16), jnp.float32))
    job = pre_optimisation_hlo_job(lowered)
    assert job is not None
    assert job() == lowered.compiler_ir("hlo").as_hlo_module().to_string()
