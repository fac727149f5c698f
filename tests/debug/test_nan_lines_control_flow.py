"""A NaN inside ``lax.cond``, ``lax.switch`` or ``jax.checkpoint`` names the cell line that holds
it (issue 28, item 5), in a real IPython shell.

The branches and the checkpointed block are defined in an *earlier* cell, as a notebook does:
JAX records the branch equations' tracebacks only down to the branch function, so the NaN is
located in that earlier cell (``In [n] line 2``), and the ``%%compile`` cell's line that runs
the ``cond`` is the error's line; no cell file name is shown.
"""

from __future__ import annotations

import re

import pytest

import nbcompile

from ..helpers import run, setup

HELPERS = """from jax import lax
def log_branch(v):
    return jnp.log(v) * 2.0
def keep_branch(v):
    return v + 1.0
def block(v):
    h = jnp.tanh(v)
    return jnp.log(h)
"""

CELLS = {
    "cond": (
        "%%compile -q --debug\ndef gated(x):\n    y = x - 0.5\n"
        "    return lax.cond(y.sum() > 0, log_branch, keep_branch, y)\ngated(x)\n",
        4,
        3,
    ),
    "switch": (
        "%%compile -q --debug\ndef routed(x):\n    y = x - 0.5\n"
        "    return lax.switch(1, [keep_branch, log_branch], y)\nrouted(x)\n",
        4,
        3,
    ),
    "checkpoint": (
        "%%compile -q --debug\ndef remat(x):\n    y = x - 0.5\n"
        "    return jax.checkpoint(block)(y)\nremat(x)\n",
        4,
        8,
    ),
}


@pytest.fixture
def ip(shell):
    ip = setup(shell)
    assert run(ip, "x = jnp.array([0.2, 1.5, 2.0], jnp.float32)").success
    return ip


@pytest.mark.parametrize("kind", sorted(CELLS))
def test_a_nan_in_a_branch_defined_earlier_names_its_cell_line(ip, kind):
    count = ip.execution_count
    assert run(ip, HELPERS).success  # In [count]
    text, call_line, helper_line = CELLS[kind]
    res = run(ip, text)
    assert res.success, res.error_in_exec
    debug = nbcompile.last().debug
    assert debug is not None and debug.stopped
    at = debug.nan_at
    assert at["primitive"] == "log" and "/" in at["id"]
    assert at["where"] == f"In [{count}] line {helper_line}", at
    assert at["line"] == call_line  # the cell line that runs the cond / switch / checkpoint
    err = str(debug.error())
    assert f"line {call_line}:" in err and f"In [{count}] line {helper_line}" in err, err
    shown = debug.text() + err
    assert not re.search(r"ipython-input|ipykernel_", shown), shown
