"""Forward / backward classification and residuals on three value_and_grad programs.

Numerics: float64 (jax.enable_x64); the compiled gradient equals jax.grad to
1e-12 relative and central finite differences (step 1e-6) to 1e-6 relative.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nbcompile.analysis import analyse

from .helpers import make_artifacts


def mlp_loss(w, x):
    h = jnp.tanh(x @ w)
    return jnp.mean(h**2)


def rnn_loss(w, xs):
    def cell(h, x):
        h = jnp.tanh(h @ w + x)
        return h, h

    _, hs = jax.lax.scan(cell, jnp.zeros((w.shape[0],), w.dtype), xs)
    return jnp.sum(hs**2)


def remat_loss(w, x):
    layer = jax.checkpoint(lambda h: jnp.sin(h @ w))
    return jnp.sum(layer(layer(x)) ** 2)


MODELS = {
    "mlp": (mlp_loss, (8, 8), (4, 8)),
    "rnn": (rnn_loss, (6, 6), (5, 6)),
    "remat": (remat_loss, (6, 6), (3, 6)),
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def grad_case(request):
    fn, ws, xs = MODELS[request.param]
    with jax.enable_x64(True):
        rng = np.random.default_rng(0)
        w = jnp.asarray(rng.standard_normal(ws) * 0.5)
        x = jnp.asarray(rng.standard_normal(xs))
        art = make_artifacts(fn, w, x, grad_argnums=0)
        value, grad = art.compiled(w, x)
        reference = jax.grad(fn)(w, x)
        fd = np.zeros(ws)
        eps = 1e-6
        for idx in np.ndindex(*ws):
            e = np.zeros(ws)
            e[idx] = eps
            fd[idx] = (fn(w + e, x) - fn(w - e, x)) / (2 * eps)
        a = analyse(art)
    return request.param, a, np.asarray(value), np.asarray(grad), np.asarray(reference), fd


def test_compiled_gradient_is_correct(grad_case):
    _, _, _, grad, reference, fd = grad_case
    assert grad.dtype == np.float64
    np.testing.assert_allclose(grad, reference, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8)


def test_every_equation_and_instruction_is_classified(grad_case):
    _, a, *_ = grad_case
    ops = [n for n in a.traced_graph.nodes if n.kind in ("op", "call")]
    assert ops and all(n.phase in ("forward", "backward") for n in ops)
    g = a.gradient
    # the op count every view shows: primitive ops, a nested call's wrapper equation is none
    assert g.forward_ops + g.backward_ops == sum(n.kind == "op" for n in ops)
    assert g.forward_ops + g.backward_ops == a.summary()["traced_ops"]
    assert g.forward_ops > 0 and g.backward_ops > 0
    compiled_nodes = [n for n in a.compiled_graph.nodes if n.kind in ("op", "fusion", "call")]
    assert all(n.phase in ("forward", "backward", "mixed") for n in compiled_nodes)
    assert sum(g.hlo_phases.values()) >= a.summary()["hlo_ops_after"] - a.compiled_graph.count(
        "output"
    )
    assert sum(g.kernels.values()) == a.summary()["kernels"]


def test_residuals_are_forward_values_read_by_backward(grad_case):
    name, a, *_ = grad_case
    g = a.gradient
    assert g.residuals, name
    assert g.residual_bytes == sum(r.bytes for r in g.residuals)
    for r in g.residuals:
        node = a.traced_graph.node(r.node)
        assert node.phase == "forward" and r.primitive == node.op
        assert r.bytes > 0 and r.line is not None
    assert a.summary()["residual_bytes"] == g.residual_bytes


def test_remat_recomputes_in_backward():
    a = analyse(
        make_artifacts(remat_loss, jnp.ones((6, 6)) * 0.1, jnp.ones((3, 6)), grad_argnums=0)
    )
    assert a.gradient.recompute_ops > 0
    recomputed = [n for n in a.traced_graph.nodes if "rematted_computation" in n.path]
    assert recomputed and all(n.phase == "backward" for n in recomputed)
    assert any(gr.kind == "remat" for gr in a.traced_graph.groups)


def test_mlp_has_mixed_fusions():
    """XLA fuses forward recomputation into backward kernels (FACTS: some fusions are mixed)."""
    w, x = jnp.ones((16, 16)) * 0.1, jnp.ones((8, 16))
    a = analyse(make_artifacts(mlp_loss, w, x, grad_argnums=0))
    phases = {f.phase for f in a.fusions}
    assert "forward" in phases or "mixed" in phases
    assert "backward" in phases or "mixed" in phases
    assert (
        a.gradient.kernels["forward"] + a.gradient.kernels["backward"] + a.gradient.kernels["mixed"]
        == a.summary()["kernels"]
    )
