"""Keras 3 models (JAX backend) through nbcompile.capture.models.adapt."""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "jax"  # before keras is first imported

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

keras = pytest.importorskip("keras", reason="keras (nbcompile[keras]) is not installed")
if keras.backend.backend() != "jax":  # keras was imported elsewhere first with another backend
    pytest.skip("keras was imported with a non-JAX backend", allow_module_level=True)

layers = keras.layers


@pytest.fixture(autouse=True)
def keras_numpy_rules(relaxed_dtypes):
    """Keras relies on NumPy's rank promotion (``(b, t, d) + (d,)``) as well as dtype promotion."""
    previous = jax.config.jax_numpy_rank_promotion
    jax.config.update("jax_numpy_rank_promotion", "allow")
    yield
    jax.config.update("jax_numpy_rank_promotion", previous)


def sequential_cnn() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            layers.Conv2D(4, 3, padding="same", activation="relu", name="conv1"),
            layers.BatchNormalization(name="bn1"),
            layers.Flatten(name="flatten"),
            layers.Dense(16, activation="relu", name="dense1"),
            layers.Dropout(0.5, name="dropout"),
            layers.Dense(3, name="dense2"),
        ],
        name="cnn",
    )


def functional_mlp() -> keras.Model:
    inputs = keras.Input((8,), name="features")
    h = layers.Dense(32, activation="relu", name="hidden1")(inputs)
    h = layers.LayerNormalization(name="norm")(h)
    outputs = layers.Dense(3, name="logits")(h)
    return keras.Model(inputs, outputs, name="mlp")


class Attention(layers.Layer):
    def __init__(self, d: int, heads: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.d, self.heads = d, heads
        self.q_proj = layers.Dense(d, name="q_proj")
        self.k_proj = layers.Dense(d, name="k_proj")
        self.v_proj = layers.Dense(d, name="v_proj")
        self.out_proj = layers.Dense(d, name="out_proj")

    def call(self, x):
        b, t = x.shape[0], x.shape[1]

        def heads(y):
            return keras.ops.reshape(y, (b, t, self.heads, self.d // self.heads))

        q, k, v = heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x))
        scores = keras.ops.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(self.d // self.heads)
        out = keras.ops.einsum("bhqk,bkhd->bqhd", keras.ops.softmax(scores), v)
        return self.out_proj(keras.ops.reshape(out, (b, t, self.d)))


class Block(layers.Layer):
    def __init__(self, d: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.norm1 = layers.LayerNormalization(name="norm1")
        self.attn = Attention(d, 2, name="attn")
        self.norm2 = layers.LayerNormalization(name="norm2")
        self.fc1 = layers.Dense(2 * d, activation="gelu", name="fc1")
        self.fc2 = layers.Dense(d, name="fc2")

    def call(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(self.fc1(self.norm2(x)))


class Transformer(keras.Model):
    def __init__(self, d: int = 16, depth: int = 2) -> None:
        super().__init__(name="transformer")
        self.blocks = [Block(d, name=f"blocks_{i}") for i in range(depth)]
        self.head = layers.Dense(4, name="head")

    def call(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def stateless(model: keras.Model, x: jax.Array, **kwargs):
    """Keras' own route on JAX: jax.jit of stateless_call over the variable values."""
    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]

    def call(trainable, non_trainable, x):
        return model.stateless_call(trainable, non_trainable, x, **kwargs)[0]

    return call, trainable, non_trainable


@pytest.fixture
def models(keras_numpy_rules):
    keras.utils.set_random_seed(0)
    x_img = jax.random.normal(jax.random.key(1), (2, 8, 8, 1))
    x_vec = jax.random.normal(jax.random.key(2), (4, 8))
    x_seq = jax.random.normal(jax.random.key(3), (2, 5, 16))
    transformer = Transformer()
    transformer(x_seq)  # build
    return {
        "cnn": (sequential_cnn(), x_img),
        "mlp": (functional_mlp(), x_vec),
        "transformer": (transformer, x_seq),
    }


def test_matches_jitted_stateless_call(models):
    for key, (model, x) in models.items():
        ad = adapt(model, (x,), {})
        assert (ad.kind, ad.name, ad.params_argnums, ad.state_argnums) == ("keras", key, (0,), (1,))
        call, trainable, non_trainable = stateless(model, x)
        assert_trees_close(jax.jit(ad.fn)(*ad.args), jax.jit(call)(trainable, non_trainable, x))


def test_training_flag_is_static_and_state_is_an_input(models):
    model, x = models["cnn"]
    ad = adapt(model, (x,), {"training": True})
    assert len(ad.args) == 3  # trainable, non-trainable (BN stats, dropout seed), x
    assert len(jax.tree.leaves(ad.args[1])) == len(model.non_trainable_variables) >= 3
    call, trainable, non_trainable = stateless(model, x, training=True)
    assert_trees_close(jax.jit(ad.fn)(*ad.args), jax.jit(call)(trainable, non_trainable, x))


def test_params_are_inputs_not_constants(models):
    for model, x in models.values():
        assert_params_are_inputs(adapt(model, (x,), {}), len(model.trainable_variables))
    model, x = models["transformer"]
    assert large_consts(jax.jit(lambda x: model(x)).trace(x).jaxpr)


def test_module_paths_show_layer_names(models):
    model, x = models["transformer"]  # subclassed model and layers
    paths = paths_of(adapt(model, (x,), {}))
    for expected in (
        "transformer/blocks_0/attn/q_proj",
        "transformer/blocks_1/attn/out_proj",
        "transformer/blocks_1/norm2",
        "transformer/head",
    ):
        assert any(p == expected or p.startswith(expected + "/") for p in paths), expected
    model, x = models["cnn"]  # keras.Sequential
    assert {"cnn/conv1", "cnn/bn1", "cnn/dense1", "cnn/dense2"} <= paths_of(adapt(model, (x,), {}))
    model, x = models["mlp"]  # functional API
    assert {"mlp/hidden1", "mlp/norm", "mlp/logits"} <= paths_of(adapt(model, (x,), {}))


def test_gradient_matches_jax_grad_of_stateless_call(models):
    model, x = models["transformer"]
    ad = adapt(model, (x,), {})
    ours = grad_of(ad, lambda y: jnp.mean(y**2))
    call, trainable, non_trainable = stateless(model, x)
    theirs = jax.grad(lambda t: jnp.mean(call(t, non_trainable, x) ** 2))(trainable)
    assert set(ours) == {v.path for v in model.trainable_variables}  # keyed by variable path
    assert_trees_close([ours[v.path] for v in model.trainable_variables], theirs)


def test_model_as_argument_of_a_loss(models):
    model, x = models["mlp"]
    y = jnp.ones((4, 3))

    def loss(model, x, y):
        return jnp.mean((model(x) - y) ** 2)

    ad = adapt(loss, (model, x, y), {})
    assert (ad.kind, ad.params_argnums, ad.state_argnums) == ("function", (0,), (3,))
    assert_params_are_inputs(ad, len(model.trainable_variables))
    assert {"mlp/hidden1", "mlp/norm", "mlp/logits"} <= paths_of(ad)
    grads = jax.grad(ad.fn)(*ad.args)
    call, trainable, non_trainable = stateless(model, x)
    theirs = jax.grad(lambda t: jnp.mean((call(t, non_trainable, x) - y) ** 2))(trainable)
    assert_trees_close([grads[v.path] for v in model.trainable_variables], theirs)
    np.testing.assert_allclose(jax.jit(ad.fn)(*ad.args), loss(model, x, y), rtol=1e-5)


def test_freeze_round_trip(models, tmp_path):
    model, x = models["mlp"]
    freeze_round_trip(adapt(model, (x,), {}), tmp_path, model(x))
