"""``--grad --debug`` checks the value-and-grad program and says so (issue 28 §4).

The classic NaN gradient: the norm ``sqrt(sum(w**2))`` at ``w = 0`` is 0 in the forward pass,
and its gradient ``w / sqrt(sum(w**2))`` is ``0 * inf = NaN``. Only the backward pass has it, so
debugging the forward program alone reports "no NaN".
"""

from __future__ import annotations

import pytest

NORM = """%%compile --grad --debug -q
def loss(w, x):
    return jnp.sqrt(jnp.sum(w ** 2)) + jnp.mean(x @ w)
loss(w, x)
"""


@pytest.fixture
def ip(shell):
    shell.reset(new_session=False)
    res = shell.run_cell(
        "import jax, jax.numpy as jnp\nw = jnp.zeros((4, 4))\nx = jnp.ones((2, 4))"
    )
    assert res.success, res.error_in_exec
    return shell


def test_grad_debug_finds_the_nan_only_the_gradient_has(ip):
    res = ip.run_cell(NORM)
    assert res.success, res.error_in_exec
    c = ip.user_ns["loss"].compilation
    d = c.debug
    assert d.program == "value_and_grad(loss)"
    assert d.stopped and d.nan_at["kind"] == "nan" and d.nan_at["line"] == 3
    assert c.grad.debug is d, "the gradient program's own result is the same run"
    text = d.text()
    assert "value_and_grad(loss)" in text.splitlines()[0], text
    err = d.error()
    assert err.code == "NBC700" and "value_and_grad(loss)" in str(err)
    assert any("NBC700" in n and "value_and_grad(loss)" in n for n in c.notes), c.notes
    # the forward program alone is clean, and says which program it checked
    forward = c.run_debug(forward=True)
    assert forward.program == "loss" and not forward.stopped
    assert "of loss op by op; no NaN" in forward.text()


def test_debug_without_grad_names_the_forward_program(ip):
    res = ip.run_cell(NORM.replace("--grad ", ""))
    assert res.success, res.error_in_exec
    d = ip.user_ns["loss"].compilation.debug
    assert d.program == "loss" and not d.stopped
    assert d.text().startswith(f"Ran {d.equations} equations of loss op by op; no NaN")
