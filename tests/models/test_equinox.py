"""Equinox models through nbcompile.capture.models.adapt."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nbcompile.capture.models import adapt

from .helpers import (
    assert_params_are_inputs,
    assert_trees_close,
    freeze_round_trip,
    grad_of,
    large_consts,
    paths_of,
)

eqx = pytest.importorskip("equinox")

pytestmark = pytest.mark.usefixtures("relaxed_dtypes")


class CNN(eqx.Module):
    conv1: eqx.nn.Conv2d
    dense1: eqx.nn.Linear
    dense2: eqx.nn.Linear
    activation: object  # a function: static
    steps: jax.Array  # an integer array: state, not a parameter

    def __init__(self, key: jax.Array) -> None:
        k1, k2, k3 = jax.random.split(key, 3)
        self.conv1 = eqx.nn.Conv2d(1, 4, 3, padding=1, key=k1)
        self.dense1 = eqx.nn.Linear(4 * 8 * 8, 16, key=k2)
        self.dense2 = eqx.nn.Linear(16, 3, key=k3)
        self.activation = jax.nn.relu
        self.steps = jnp.zeros((), jnp.int32)

    def __call__(self, x: jax.Array) -> jax.Array:  # one image (1, 8, 8)
        h = self.activation(self.conv1(x)).reshape(-1)
        return self.dense2(self.activation(self.dense1(h))) + self.steps.astype(jnp.float32)


class Attention(eqx.Module):
    q_proj: eqx.nn.Linear
    k_proj: eqx.nn.Linear
    v_proj: eqx.nn.Linear
    out_proj: eqx.nn.Linear
    heads: int = eqx.field(static=True)

    def __init__(self, d: int, heads: int, key: jax.Array) -> None:
        keys = jax.random.split(key, 4)
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (
            eqx.nn.Linear(d, d, key=k) for k in keys
        )
        self.heads = heads

    def __call__(self, x: jax.Array) -> jax.Array:  # (tokens, d)
        t, d = x.shape

        def heads(proj: eqx.nn.Linear) -> jax.Array:
            return jax.vmap(proj)(x).reshape(t, self.heads, d // self.heads)

        q, k, v = heads(self.q_proj), heads(self.k_proj), heads(self.v_proj)
        w = jax.nn.softmax(jnp.einsum("qhd,khd->hqk", q, k) / np.sqrt(d // self.heads))
        return jax.vmap(self.out_proj)(jnp.einsum("hqk,khd->qhd", w, v).reshape(t, d))


class Block(eqx.Module):
    norm1: eqx.nn.LayerNorm
    attn: Attention
    norm2: eqx.nn.LayerNorm
    mlp: eqx.nn.MLP

    def __init__(self, d: int, key: jax.Array) -> None:
        k1, k2 = jax.random.split(key)
        self.norm1, self.norm2 = eqx.nn.LayerNorm(d), eqx.nn.LayerNorm(d)
        self.attn = Attention(d, 2, k1)
        self.mlp = eqx.nn.MLP(d, d, 2 * d, depth=1, activation=jax.nn.gelu, key=k2)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + self.attn(jax.vmap(self.norm1)(x))
        return x + jax.vmap(self.mlp)(jax.vmap(self.norm2)(x))


class Transformer(eqx.Module):
    blocks: list[Block]
    head: eqx.nn.Linear

    def __init__(self, key: jax.Array, d: int = 16, depth: int = 2) -> None:
        keys = jax.random.split(key, depth + 1)
        self.blocks = [Block(d, k) for k in keys[:-1]]
        self.head = eqx.nn.Linear(d, 4, key=keys[-1])

    def __call__(self, x: jax.Array) -> jax.Array:
        for block in self.blocks:
            x = block(x)
        return jax.vmap(self.head)(x)


def n_params(model: eqx.Module) -> int:
    return len(jax.tree.leaves(eqx.filter(model, eqx.is_inexact_array)))


@pytest.fixture
def cnn():
    return CNN(jax.random.key(0)), jax.random.normal(jax.random.key(1), (1, 8, 8))


@pytest.fixture
def transformer():
    return Transformer(jax.random.key(0)), jax.random.normal(jax.random.key(1), (5, 16))


def test_matches_filter_jit(cnn, transformer):
    for model, x in (cnn, transformer):
        ad = adapt(model, (x,), {})
        assert (ad.kind, ad.name, ad.params_argnums, ad.state_argnums) == (
            "equinox",
            type(model).__name__,
            (0,),
            (1,),
        )
        assert_trees_close(jax.jit(ad.fn)(*ad.args), eqx.filter_jit(model)(x))


def test_integer_arrays_are_state_and_functions_are_static(cnn):
    model, x = cnn
    ad = adapt(model, (x,), {})
    (steps,) = jax.tree.leaves(ad.args[1])
    assert steps.dtype == jnp.int32
    assert all(jnp.issubdtype(p.dtype, jnp.floating) for p in jax.tree.leaves(ad.args[0]))


def test_params_are_inputs_not_constants(cnn, transformer):
    for model, x in (cnn, transformer):
        assert_params_are_inputs(adapt(model, (x,), {}), n_params(model))
    model, x = transformer
    assert large_consts(jax.jit(lambda x: model(x)).trace(x).jaxpr)


def test_module_paths_name_the_attributes(cnn, transformer):
    model, x = transformer
    paths = paths_of(adapt(model, (x,), {}))
    for expected in (
        "Transformer/blocks_0/attn/q_proj",
        "Transformer/blocks_1/attn/out_proj",
        "Transformer/blocks_1/norm2",
        "Transformer/head",
    ):
        assert any(p == expected or p.startswith(expected + "/") for p in paths), expected
    # eqx.nn.MLP opens its own "eqx.nn.MLP" scope around its layers
    assert any(p.startswith("Transformer/blocks_0/mlp/") and "/layers_1" in p for p in paths)
    model, x = cnn
    paths = paths_of(adapt(model, (x,), {}))
    for expected in ("CNN/conv1", "CNN/dense1", "CNN/dense2"):
        assert any(p == expected or p.startswith(expected + "/") for p in paths), expected
    # plain Equinox puts no module names in the name stack: the paths come from the adapter
    assert not any("dense1" in str(e.source_info.name_stack) for e in jax.make_jaxpr(model)(x).eqns)


def test_gradient_matches_filter_grad(transformer):
    model, x = transformer
    ad = adapt(model, (x,), {})
    ours = grad_of(ad, lambda y: jnp.mean(y**2))
    theirs = eqx.filter_grad(lambda m: jnp.mean(m(x) ** 2))(model)
    assert_trees_close(ours, eqx.filter(theirs, eqx.is_inexact_array))


def test_model_as_argument_of_a_loss_and_filter_jit_target(transformer):
    model, x = transformer
    y = jnp.ones((5, 4))

    @eqx.filter_jit
    def loss(model, x, y):
        return jnp.mean((model(x) - y) ** 2)

    ad = adapt(loss, (model, x, y), {})
    assert (ad.kind, ad.params_argnums, ad.state_argnums) == ("function", (0,), (3,))
    assert_params_are_inputs(ad, n_params(model))
    grads = jax.grad(ad.fn, argnums=0)(*ad.args)
    assert_trees_close(grads, eqx.filter(eqx.filter_grad(loss)(model, x, y), eqx.is_inexact_array))
    np.testing.assert_allclose(jax.jit(ad.fn)(*ad.args), loss(model, x, y), rtol=1e-5)


def test_freeze_round_trip(transformer, tmp_path):
    model, x = transformer
    freeze_round_trip(adapt(model, (x,), {}), tmp_path, model(x))
