"""The program of the "down to the metal" tests: a matmul, then a 24-step Python loop of
element-wise ops (unrolled at trace time: 72 equations on one line), compiled once per shell
by ``%%compile --passes`` through the magic."""

from __future__ import annotations

from typing import Any

SETUP = """
import jax, jax.numpy as jnp
w = jnp.ones((64, 64)) * 0.01; x = jnp.ones((32, 64))
"""

# counting the %%compile line as 1: line 3 is the matmul, line 5 the loop body
CELL = """%%compile -f -q --passes
def step(w, x):
    h = x @ w
    for _ in range(24):
        h = jnp.tanh(h) * 0.5 + h
    return h
step(w, x)
"""
MATMUL_LINE = 3
LOOP_LINE = 5

_COMPILED: dict[int, Any] = {}


def compiled(shell: Any) -> Any:
    """The Compilation of :data:`CELL` in ``shell`` (compiled on first use)."""
    import nbcompile

    if id(shell) not in _COMPILED:
        shell.reset(new_session=False)
        assert shell.run_cell(SETUP).success
        result = shell.run_cell(CELL)
        assert result.success, result.error_in_exec
        comp = nbcompile.last()
        assert comp._metal is not None, "--passes records the dump during the cell"
        _COMPILED[id(shell)] = comp
    return _COMPILED[id(shell)]


def tanh_kernel(comp: Any) -> str:
    """The name of the kernel that holds the loop's tanh ops."""
    return next(f.name for f in comp.fusions if "tanh" in f.ops)


# issue 39: an element-wise chain that touches no dot, summed: XLA:CPU hands the whole chain
# (with the reduction) to YNNPACK as one ``ynn_fusion`` (jaxlib 0.10.2 and 0.12.0.1), and the
# matmul beside it is a YNNPACK dot. Line 5 is the loop body, line 6 the sum.
CHAIN_SETUP = """
import jax, jax.numpy as jnp
w = jnp.ones((64, 64)) * 0.01; x = jnp.ones((32, 64)); z = jnp.ones((256, 256)) * 0.1
"""
CHAIN_CELL = """%%compile -f -q --passes
def chain(w, x, z):
    h = x @ w
    for _ in range(24):
        z = jnp.tanh(z) * 0.5 + 0.25
    return h, z.sum()
chain(w, x, z)
"""
CHAIN_MATMUL_LINE = 3
CHAIN_LOOP_LINE = 5
CHAIN_SUM_LINE = 6


def chain_compiled(shell: Any) -> Any:
    """The Compilation of :data:`CHAIN_CELL` in ``shell`` (compiled on every call: tests
    look at what one more compile adds)."""
    import nbcompile

    shell.reset(new_session=False)
    assert shell.run_cell(CHAIN_SETUP).success
    result = shell.run_cell(CHAIN_CELL)
    assert result.success, result.error_in_exec
    return nbcompile.last()


def chain_kernel(comp: Any) -> Any:
    """The fusion (``c.fusions``) that holds the loop's tanh ops."""
    return next(f for f in comp.fusions if "tanh" in f.ops)
