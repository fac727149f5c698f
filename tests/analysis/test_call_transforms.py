"""A JAX transformation around the user's function keeps the user's groups (issue 40 item 7).

JAX's remat guide calls ``jax.checkpoint(layer)`` in a loop; JAX traces ``layer`` once and
reuses that trace for the other calls, so none of ``layer``'s Python runs for them. Each call is
still one group ``layer#k`` (``layer#1`` … ``layer#4``), paired with its backward group under
``--grad``, named by the kernels it became and so in ``profile.by_function``; the same for
``jax.jit(layer)`` (inline or bound to a name first), ``jax.vmap(layer)`` and a
``jax.custom_vjp`` layer. Both call-capture backends give the same groups.

The model is this test file's own functions: a test file is the user's code.
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nbcompile
from nbcompile.capture.calls import record_calls
from nbcompile.stages import make_jitted


def layer(w, x):
    return jnp.sin(w @ x)


jit_layer = jax.jit(layer)


@jax.custom_vjp
def custom_layer(w, x):
    return layer(w, x)


def _custom_fwd(w, x):
    return layer(w, x), (w, x)


def _custom_bwd(res, g):
    w, x = res
    return jax.vjp(layer, w, x)[1](g)


custom_layer.defvjp(_custom_fwd, _custom_bwd)


def remat_net(ws, x):
    for w in ws:
        x = jax.checkpoint(layer)(w, x)
    return jnp.mean(x)


def jit_net(ws, x):
    for w in ws:
        x = jax.jit(layer)(w, x)
    return jnp.mean(x)


def named_jit_net(ws, x):
    for w in ws:
        x = jit_layer(w, x)
    return jnp.mean(x)


def vmap_net(ws, x):
    for w in ws:
        x = jax.vmap(layer, in_axes=(None, 0))(w, x)
    return jnp.mean(x)


def custom_net(ws, x):
    for w in ws:
        x = custom_layer(w, x)
    return jnp.mean(x)


NETS = {
    "checkpoint": remat_net,
    "jit": jit_net,
    "named jit": named_jit_net,
    "vmap": vmap_net,
    "custom_vjp": custom_net,
}
LAYERS = [f"layer#{k}" for k in range(1, 5)]
WS = [jnp.asarray(np.eye(4, dtype=np.float32) * (0.5 + 0.1 * k)) for k in range(4)]
X = jnp.ones((4,), jnp.float32)
XS = jnp.ones((3, 4), jnp.float32)
BACKENDS = ["frames"] + (["monitoring"] if sys.version_info >= (3, 12) else [])


def _args(name):
    return (WS, XS) if name == "vmap" else (WS, X)


def _expected(name):
    if name == "custom_vjp":  # each runs the user's layer: a call inside it
        return [label for k in range(1, 5) for label in (f"custom_layer#{k}", "layer#1")]
    return LAYERS


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(NETS))
def test_each_call_of_a_transformed_layer_is_its_own_call(name, backend):
    with record_calls(backend=backend) as log:
        make_jitted(NETS[name]).trace(*_args(name))
    assert log.complete and log.backend == backend
    assert [c.label for c in log.calls if c.kind == "call"] == _expected(name)


@pytest.fixture(scope="module", params=BACKENDS)
def remat(request):
    mp = pytest.MonkeyPatch()
    mp.setenv("NBCOMPILE_CALL_CAPTURE", request.param)
    try:
        yield nbcompile.compile(remat_net, WS, X, grad=True)
    finally:
        mp.undo()


def test_checkpoint_in_a_loop_keeps_the_groups_and_their_gradient_pairs(remat):
    c = remat
    groups = [g.label for g in c.graph.groups if g.call == "call"]
    assert groups == LAYERS
    pairs = {fwd: bwd for fwd, bwd, _bytes in c.gradient.pairs}
    for name in LAYERS:
        assert pairs.get(name) == f"{name} (backward)"
    grad_groups = {g.label for g in c.grad.analysis.traced_graph.groups if g.call == "call"}
    assert grad_groups >= set(LAYERS) | {f"{n} (backward)" for n in LAYERS}
    # the kernels XLA made name the calls they came from: each of the four
    named = {p.split("/")[0] for paths in c.grad.analysis.kernel_functions.values() for p in paths}
    assert named >= set(LAYERS)


def test_checkpoint_in_a_loop_profiles_by_each_call(remat):
    profile = remat.run_profile(calls=2)
    seen = {k.split("/")[0].removesuffix(" (backward)") for k in profile.by_function}
    assert seen >= set(LAYERS), profile.by_function
