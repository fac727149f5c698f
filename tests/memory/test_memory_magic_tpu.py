"""Will it fit, before you have the hardware: through %%compile in a real IPython shell."""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("libtpu") is None, reason="needs the [tpu] extra (libtpu)"
)

SETUP = """
import jax, jax.numpy as jnp
big = jax.ShapeDtypeStruct((50_000, 50_000), jnp.float32)   # 10 GB of weights, never allocated
small = jax.ShapeDtypeStruct((2_000, 2_000), jnp.float32)
x = jax.ShapeDtypeStruct((8, {n}), jnp.float32)
"""

CELL = """%%compile -q --grad --memory --backend tpu --topology v5e:2x2 --args "(w, x)"
def loss(w, x):
    return jnp.mean(jnp.tanh(x @ w) ** 2)
"""


@pytest.mark.slow
@pytest.mark.parametrize(("weight", "n", "fits"), [("big", 50_000, False), ("small", 2_000, True)])
def test_one_layer_loss_fits_a_v5e_chip_or_not(shell, weight, n, fits):
    import nbcompile

    shell.reset(new_session=False)
    assert shell.run_cell(SETUP.format(n=n) + f"w = {weight}\n").success
    res = shell.run_cell(CELL)
    assert res.success, res.error_in_exec
    c = nbcompile.last()
    m = c.memory_map
    assert m.fits is fits, (m.peak_bytes, m.capacity_bytes, c.notes)
    assert m.capacity_bytes == 16 * 2**30  # one v5e chip's HBM (spec)
    assert not c.runnable and shell.user_ns["loss"] is not c.fn  # planned, not rebound
    if not fits:
        assert m.peak_bytes > m.capacity_bytes
        assert any("refused" in n or "does not fit" in n for n in c.notes), c.notes
