"""Shared helpers for the magic tests: a setup cell, the example cell, and checks."""

from __future__ import annotations

from typing import Any

from _behaviour import XlaCompiles

from nbcompile.errors import NbcompileError

SETUP = """
import jax, jax.numpy as jnp, numpy as np
params = {"w": jnp.asarray(np.random.default_rng(0).normal(size=(3, 4)), jnp.float32),
          "b": jnp.zeros((1, 4), jnp.float32)}
x = jnp.asarray(np.random.default_rng(1).normal(size=(2, 3)), jnp.float32)
"""

PREDICT = """%%compile{opts}
def predict(params, x):
    h = jnp.tanh(x @ params["w"] + params["b"])
    return h * 2.0 + 1.0
predict(params, x){end}
"""

COUNTER = XlaCompiles()


def cell(text: str) -> str:
    """Cell text without its `%%compile` line (run_cell_magic takes the body)."""
    return text.split("\n", 1)[1]


def run(ip: Any, text: str) -> Any:
    return ip.run_cell(text)


def setup(shell: Any) -> Any:
    shell.reset(new_session=False)
    res = shell.run_cell(SETUP)
    assert res.success, res.error_in_exec
    return shell


def failing(ip: Any, text: str, code: str, line: int | None) -> NbcompileError:
    """Run a failing cell; check the error, its line, and that the namespace is unchanged."""
    before = dict(ip.user_ns)
    res = run(ip, text)
    err = res.error_in_exec
    assert isinstance(err, NbcompileError), repr(err)
    assert err.code == code, str(err)
    assert err.line == line, str(err)
    after = ip.user_ns
    added = set(after) - set(before) - {"_", "__", "___"}
    added = {n for n in added if not n.startswith("_")}
    assert not added, f"names leaked from a failed cell: {added}"
    changed = [n for n in before if not n.startswith("_") and after.get(n) is not before[n]]
    assert not changed, f"names changed by a failed cell: {changed}"
    assert run(ip, PREDICT.format(opts=" -q -f", end="")).success, "next %%compile must work"
    return err
