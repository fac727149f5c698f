"""Flax NNX models through nbcompile.capture.models.adapt."""

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

nnx = pytest.importorskip("flax.nnx")

pytestmark = pytest.mark.usefixtures("relaxed_dtypes")


class CNN(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs) -> None:
        self.conv1 = nnx.Conv(1, 4, kernel_size=(3, 3), rngs=rngs)
        self.bn1 = nnx.BatchNorm(4, rngs=rngs)
        self.dropout = nnx.Dropout(0.5, rngs=rngs)
        self.dense1 = nnx.Linear(4 * 8 * 8, 16, rngs=rngs)
        self.dense2 = nnx.Linear(16, 3, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = nnx.relu(self.bn1(self.conv1(x)))
        x = self.dropout(x.reshape(x.shape[0], -1))
        return self.dense2(nnx.relu(self.dense1(x)))


class Attention(nnx.Module):
    def __init__(self, d: int, heads: int, *, rngs: nnx.Rngs) -> None:
        self.heads = heads
        self.q_proj = nnx.Linear(d, d, rngs=rngs)
        self.k_proj = nnx.Linear(d, d, rngs=rngs)
        self.v_proj = nnx.Linear(d, d, rngs=rngs)
        self.out_proj = nnx.Linear(d, d, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        b, t, d = x.shape

        def heads(y: jax.Array) -> jax.Array:
            return y.reshape(b, t, self.heads, d // self.heads)

        q, k, v = heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x))
        w = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(d // self.heads))
        return self.out_proj(jnp.einsum("bhqk,bkhd->bqhd", w, v).reshape(b, t, d))


class Block(nnx.Module):
    def __init__(self, d: int, *, rngs: nnx.Rngs) -> None:
        self.norm1 = nnx.LayerNorm(d, rngs=rngs)
        self.attn = Attention(d, 2, rngs=rngs)
        self.norm2 = nnx.LayerNorm(d, rngs=rngs)
        self.mlp = nnx.Sequential(
            nnx.Linear(d, 2 * d, rngs=rngs), nnx.gelu, nnx.Linear(2 * d, d, rngs=rngs)
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Transformer(nnx.Module):
    def __init__(self, d: int = 16, depth: int = 2, *, rngs: nnx.Rngs) -> None:
        self.blocks = nnx.List([Block(d, rngs=rngs) for _ in range(depth)])
        self.head = nnx.Linear(d, 4, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def n_params(model: nnx.Module) -> int:
    return len(jax.tree.leaves(nnx.state(model, nnx.Param)))


@pytest.fixture
def cnn() -> tuple[CNN, jax.Array]:
    return CNN(rngs=nnx.Rngs(0)), jax.random.normal(jax.random.key(1), (2, 8, 8, 1))


@pytest.fixture
def transformer() -> tuple[Transformer, jax.Array]:
    return Transformer(rngs=nnx.Rngs(0)), jax.random.normal(jax.random.key(1), (2, 5, 16))


def test_cnn_matches_nnx_jit_with_state_as_inputs(cnn):
    model, x = cnn  # train mode: batch statistics and dropout RNG state are used
    ad = adapt(model, (x,), {})
    assert (ad.kind, ad.name, ad.params_argnums, ad.state_argnums) == (
        "flax-nnx",
        "CNN",
        (0,),
        (1,),
    )
    ours = jax.jit(ad.fn)(*ad.args)  # before nnx.jit, which advances the model's RNG count
    assert_trees_close(ours, nnx.jit(lambda m, x: m(x))(model, x))
    state_leaves = jax.tree.leaves(ad.args[1])
    assert len(state_leaves) == 4  # BatchNorm mean/var + dropout RNG key/count
    assert_params_are_inputs(ad, n_params(model))


def test_transformer_matches_nnx_jit(transformer):
    model, x = transformer
    ad = adapt(model, (x,), {})
    assert_trees_close(jax.jit(ad.fn)(*ad.args), nnx.jit(lambda m, x: m(x))(model, x))


def test_params_are_inputs_not_constants(transformer):
    model, x = transformer
    closed = assert_params_are_inputs(adapt(model, (x,), {}), n_params(model))
    assert closed.jaxpr.eqns
    # the same model closed over would bake its weights in: the check above can tell
    assert large_consts(jax.jit(lambda x: model(x)).trace(x).jaxpr)


def test_module_paths_name_the_attributes(transformer, cnn):
    model, x = transformer
    paths = paths_of(adapt(model, (x,), {}))
    for expected in (
        "Transformer/blocks_0/attn/q_proj",
        "Transformer/blocks_1/attn/out_proj",
        "Transformer/blocks_1/norm2",
        "Transformer/head",
    ):
        assert expected in paths
    assert any(p.startswith("Transformer/blocks_0/mlp/layers_") for p in paths)
    model, x = cnn
    assert {"CNN/conv1", "CNN/bn1", "CNN/dense1", "CNN/dense2"} <= paths_of(adapt(model, (x,), {}))


def test_scopes_are_restored_after_tracing(transformer):
    model, x = transformer
    before = (nnx.Linear.__dict__["__call__"], Block.__dict__["__call__"])
    paths_of(adapt(model, (x,), {}))
    assert (nnx.Linear.__dict__["__call__"], Block.__dict__["__call__"]) == before
    # outside adapt, calling the model opens no scopes
    assert all(
        "blocks_0" not in str(e.source_info.name_stack)
        for e in jax.make_jaxpr(lambda x: model(x))(x).eqns
    )


def test_gradient_matches_nnx_grad(transformer):
    model, x = transformer
    ad = adapt(model, (x,), {})
    ours = grad_of(ad, lambda y: jnp.mean(y**2))
    theirs = nnx.grad(lambda m: jnp.mean(m(x) ** 2))(model)
    assert_trees_close(ours, theirs)


def test_model_as_argument_of_a_loss(transformer):
    model, x = transformer
    y = jnp.ones((2, 5, 4))

    def loss(model, x, y):
        return jnp.mean((model(x) - y) ** 2)

    ad = adapt(loss, (model, x, y), {})
    assert (ad.kind, ad.params_argnums, ad.state_argnums) == ("function", (0,), (3,))
    assert ad.args[1] is x and ad.args[2] is y
    assert_params_are_inputs(ad, n_params(model))
    assert "Transformer/blocks_1/attn/v_proj" in paths_of(ad)
    grads = jax.grad(ad.fn, argnums=ad.params_argnums[0])(*ad.args)
    assert_trees_close(grads, nnx.grad(loss)(model, x, y))
    np.testing.assert_allclose(jax.jit(ad.fn)(*ad.args), loss(model, x, y), rtol=1e-5)


def test_freeze_round_trip(transformer, tmp_path):
    model, x = transformer
    ad = adapt(model, (x,), {})
    freeze_round_trip(ad, tmp_path, nnx.jit(lambda m, x: m(x))(model, x))


def test_freeze_round_trip_with_batch_stats_and_rng_state(cnn, tmp_path):
    model, x = cnn
    model.eval()
    ad = adapt(model, (x,), {})
    # RNG keys travel as plain uint32 key data, so every input is an ordinary array
    assert not any(
        jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key) for a in jax.tree.leaves(ad.args)
    )
    freeze_round_trip(ad, tmp_path, model(x))
