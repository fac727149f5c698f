"""``%%compile --grad --memory`` in a real IPython shell: the forward values kept for the backward
pass (residuals) are live at the peak, on the cell lines of the forward ops that made them."""

from __future__ import annotations

import pytest

import nbcompile

SETUP = """
import jax, jax.numpy as jnp
ks = jax.random.split(jax.random.key(0), 5)
params = {"w1": jax.random.normal(ks[0], (64, 128)) / 8,
          "w2": jax.random.normal(ks[1], (128, 128)) / 11,
          "w3": jax.random.normal(ks[2], (128, 128)) / 11,
          "w4": jax.random.normal(ks[3], (128, 1)) / 11}
x = jax.random.normal(ks[4], (4096, 64))
"""

# lines count the %%compile line as 1: the forward tanh ops are on lines 3, 4 and 5
CELL = """%%compile --grad --memory
def loss(params, x):
    h = jnp.tanh(x @ params["w1"])
    h = jnp.tanh(h @ params["w2"])
    h = jnp.tanh(h @ params["w3"])
    return jnp.mean((h @ params["w4"]) ** 2)
loss(params, x)
"""
FORWARD = {3, 4, 5}


@pytest.fixture
def ip(shell):
    shell.reset(new_session=False)
    assert shell.run_cell(SETUP).success
    return shell


def test_residuals_at_the_peak_sit_on_the_forward_lines_that_made_them(ip):
    result = ip.run_cell(CELL)
    assert result.success, result.error_in_exec
    c = nbcompile.last()
    m = c.memory_map
    assert m.program == "value_and_grad"
    residuals = [b for b in m.at_peak if b.kind == "residual"]
    assert residuals, m.text()
    # batch 4096 x 128 activations: residuals outweigh the weights and the outputs together
    kept = sum(b.bytes for b in residuals)
    assert kept == m.by_kind["residual"] >= 0.4 * m.peak_bytes
    assert kept > m.by_kind["parameter"] + m.by_kind["output"]
    lines = {line for b in residuals for line in b.source_lines}
    assert lines <= FORWARD and len(lines) >= 2
    assert all(b.phase == "forward" and b.op == "tanh" for b in residuals)
    # the same locations the fusions use: this cell, its visible lines
    for b in residuals:
        assert b.lines and all(loc.line in FORWARD and loc.is_cell for loc in b.lines)
    assert sum(v for line, v in m.by_cell_line.items() if line in FORWARD) >= kept
    # --memory computed it during the cell: the view's report carries it, labelled
    memory = c.extras["memory"]
    assert memory["peak_bytes"] == {"value": m.peak_bytes, "source": "XLA"}
    assert "residual" in memory["text"]
