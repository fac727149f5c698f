"""Error codes and lines for first-week mistakes (issue 28, item 9), in a real IPython shell.

Each cell is what a new user writes: ``float()`` / ``np.tanh`` on a traced value (NBC205, not
the shape error NBC202), an integer argument used as a shape (NBC202 naming ``--static n``), a
bug inside the ``__call__`` of an NNX module defined in an *earlier* cell (the line of that cell),
and a traced value appended to a global list (NBC204 at the ``append`` line).
"""

from __future__ import annotations

import pytest

from nbcompile.errors import NbcompileError

from .helpers import failing, run, setup

# An NNX module after Flax's NNX basics guide (google/flax, docs_nnx/nnx_basics.md): a Linear
# layer and an activation in __call__; re-implemented here, with the user's bug on line 6 (the
# projection has 4 rows where the layer gives 5 features).
NNX_BLOCK = """from flax import nnx
class Block(nnx.Module):
    def __init__(self, din, dout, *, rngs):
        self.linear = nnx.Linear(din, dout, rngs=rngs)
    def __call__(self, x):
        return nnx.relu(self.linear(x)) @ jnp.ones((4, 4))
block = Block(3, 5, rngs=nnx.Rngs(0))
"""


@pytest.fixture
def ip(shell):
    return setup(shell)


def test_conversions_of_traced_values_are_nbc205(ip):
    float_cell = "%%compile\ndef scale(x):\n    s = float(x.sum())\n    return x * s\nscale(x)\n"
    err = failing(ip, float_cell, "NBC205", 3)
    assert "float(x.sum())" in str(err)
    numpy_cell = "%%compile\ndef act(x):\n    return np.tanh(x)\nact(x)\n"
    failing(ip, numpy_cell, "NBC205", 3)


def test_an_int_used_as_a_shape_names_static(ip):
    text = "%%compile\ndef rows(x, n):\n    return x.reshape(n, -1)\nrows(x, 2)\n"
    err = failing(ip, text, "NBC202", 3)
    assert "--static n" in str(err) and "--static x" not in str(err)
    ok = run(ip, "%%compile -q --static n\n" + text.split("\n", 1)[1])
    assert ok.success, ok.error_in_exec


def test_a_bug_in_an_nnx_call_defined_in_an_earlier_cell_names_that_cell_line(ip):
    count = ip.execution_count
    assert run(ip, NNX_BLOCK).success  # In [count]
    err = failing(
        ip,
        "%%compile\ndef forward(block, x):\n    return block(x)\nforward(block, x)\n",
        "NBC200",
        3,
    )
    assert f"In [{count}] line 6" in str(err) and "jnp.ones((4, 4))" in str(err), str(err)
    err = failing(ip, "%%compile\nblock(x)\n", "NBC200", None)
    assert f"In [{count}] line 6" in str(err), str(err)


def test_a_tracer_appended_to_a_global_names_the_append_line(ip):
    assert run(ip, "cache = []").success
    text = (
        "%%compile\ndef keep(x):\n    h = jnp.tanh(x)\n    cache.append(h)\n    return h * 2\n"
        "keep(x)\n"
    )
    err = run(ip, text).error_in_exec
    ip.user_ns["cache"].clear()  # the user's list still holds the tracer
    assert isinstance(err, NbcompileError), repr(err)
    assert (err.code, err.line) == ("NBC204", 4), str(err)


def test_a_tracer_left_by_an_earlier_failed_cell_does_not_fail_later_cells(ip):
    """After NBC204 the user's list still holds the tracer (the cell stored it there); the next,
    fixed cell must compile instead of being blamed for the old tracer."""
    assert run(ip, "cache = []").success
    text = (
        "%%compile\ndef keep(x):\n    h = jnp.tanh(x)\n    cache.append(h)\n    return h * 2\n"
        "keep(x)\n"
    )
    err = run(ip, text).error_in_exec
    assert isinstance(err, NbcompileError) and err.code == "NBC204", repr(err)
    fixed = run(ip, "%%compile -q\ndef double(x):\n    return jnp.tanh(x) * 2\ndouble(x)\n")
    assert fixed.success, repr(fixed.error_in_exec)
    err = run(ip, text.replace("keep", "keep2")).error_in_exec  # a new leak is still caught
    assert isinstance(err, NbcompileError) and err.code == "NBC204", repr(err)
    ip.user_ns["cache"].clear()
