"""Flax Linen models through nbcompile.capture.models.adapt."""

from __future__ import annotations

import functools

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

nn = pytest.importorskip("flax.linen")

pytestmark = pytest.mark.usefixtures("relaxed_dtypes")


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        x = nn.relu(nn.Dense(32, name="dense1")(x))
        x = nn.BatchNorm(use_running_average=not train, name="bn")(x)
        return nn.Dense(3, name="dense2")(x)


class Attention(nn.Module):
    d: int
    heads: int = 2

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b, t, _ = x.shape
        q, k, v = (
            nn.Dense(self.d, name=n)(x).reshape(b, t, self.heads, -1)
            for n in ("q_proj", "k_proj", "v_proj")
        )
        w = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(self.d // self.heads))
        out = jnp.einsum("bhqk,bkhd->bqhd", w, v).reshape(b, t, self.d)
        return nn.Dense(self.d, name="out_proj")(out)


class Block(nn.Module):
    d: int

    def setup(self) -> None:
        self.norm1, self.norm2 = nn.LayerNorm(), nn.LayerNorm()
        self.attn = Attention(self.d)
        self.mlp = [nn.Dense(2 * self.d), nn.Dense(self.d)]

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp[1](nn.gelu(self.mlp[0](self.norm2(x))))


class Transformer(nn.Module):
    d: int = 16
    depth: int = 2

    def setup(self) -> None:
        self.blocks = [Block(self.d) for _ in range(self.depth)]
        self.head = nn.Dense(4)

    def __call__(self, x: jax.Array) -> jax.Array:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


@pytest.fixture
def mlp():
    model, x = MLP(), jax.random.normal(jax.random.key(1), (4, 8))
    return model, model.init(jax.random.key(0), x), x


@pytest.fixture
def transformer():
    model, x = Transformer(), jax.random.normal(jax.random.key(1), (2, 5, 16))
    return model, model.init(jax.random.key(0), x), x


def n_params(variables) -> int:
    return len(jax.tree.leaves(variables["params"]))


def test_apply_matches_jitted_apply(mlp, transformer):
    for model, variables, x in (mlp, transformer):
        ad = adapt(model.apply, (variables, x), {})
        assert (ad.kind, ad.name, ad.params_argnums, ad.state_argnums) == (
            "flax-linen",
            type(model).__name__,
            (0,),
            (1,),
        )
        assert_trees_close(jax.jit(ad.fn)(*ad.args), jax.jit(model.apply)(variables, x))


def test_batch_stats_are_state_inputs_and_mutable_apply_works(mlp):
    model, variables, x = mlp
    ad = adapt(model.apply, (variables, x), {"train": True, "mutable": ["batch_stats"]})
    assert set(ad.args[1]) == {"batch_stats"} and ad.args[2] is x and len(ad.args) == 3
    out, updates = jax.jit(ad.fn)(*ad.args)
    train_apply = functools.partial(model.apply, train=True, mutable=["batch_stats"])
    ref_out, ref_updates = jax.jit(train_apply)(variables, x)
    assert_trees_close((out, updates), (ref_out, ref_updates))
    assert_params_are_inputs(ad, n_params(variables))


def test_bound_module_call(transformer):
    model, variables, x = transformer
    bound = model.bind(variables)
    ad = adapt(bound, (x,), {})
    assert ad.kind == "flax-linen" and ad.args[2] is x
    assert_trees_close(jax.jit(ad.fn)(*ad.args), model.apply(variables, x))


def test_unbound_module_call_is_a_clear_error(transformer):
    from nbcompile.errors import CaptureError

    model, _variables, x = transformer
    with pytest.raises(CaptureError, match=r"model\.apply\(variables, x\)"):
        adapt(model, (x,), {})


def test_params_are_inputs_not_constants(transformer):
    model, variables, x = transformer
    assert_params_are_inputs(adapt(model.apply, (variables, x), {}), n_params(variables))
    assert large_consts(jax.jit(lambda x: model.apply(variables, x)).trace(x).jaxpr)


def test_module_paths_name_the_attributes(transformer, mlp):
    model, variables, x = transformer
    paths = paths_of(adapt(model.apply, (variables, x), {}))
    for expected in (
        "Transformer/blocks_0/attn/q_proj",
        "Transformer/blocks_1/attn/out_proj",
        "Transformer/blocks_1/mlp_0",
        "Transformer/head",
    ):
        assert expected in paths
    model, variables, x = mlp
    assert {"MLP/dense1", "MLP/bn", "MLP/dense2"} <= paths_of(
        adapt(model.apply, (variables, x), {})
    )


def test_gradient_matches_jax_grad_on_variables(transformer):
    model, variables, x = transformer
    ad = adapt(model.apply, (variables, x), {})
    ours = grad_of(ad, lambda y: jnp.mean(y**2))
    theirs = jax.grad(lambda v: jnp.mean(model.apply(v, x) ** 2))(variables)["params"]
    assert_trees_close(ours, theirs)


def test_freeze_round_trip(mlp, tmp_path):
    model, variables, x = mlp
    ad = adapt(model.apply, (variables, x), {})
    freeze_round_trip(ad, tmp_path, model.apply(variables, x))
