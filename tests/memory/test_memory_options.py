"""``memory_options``: every variant is compiled and measured (XLA:CPU here, with a budget)."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest
from flax import nnx

import nbcompile
from nbcompile.measure._remat import layer_remat, remat_layers
from nbcompile.measure.memory_options import memory_options


def loss(params, x):
    h = x
    for w in params:
        h = jnp.tanh(h @ w)
    return jnp.mean(h**2)


@pytest.fixture(scope="module")
def mlp():
    ks = jax.random.split(jax.random.key(0), 4)
    params = [jax.random.normal(k, (128, 128)) / 12 for k in ks[:3]]
    x = jax.random.normal(ks[3], (512, 128))
    return nbcompile.compile(loss, params, x, grad=True)


def test_policies_and_donation_are_compiled_and_measured(mlp):
    budget = mlp.memory_map.required_bytes * 3
    o = memory_options(mlp, capacity=budget, search_batch=False)
    base = o.baseline
    assert base.required_bytes == mlp.memory_map.required_bytes and base.flops > 0
    names = [v.name for v in o.options]
    assert names == ["remat: nothing_saveable", "remat: dots_saveable", "donate params"]
    assert all(v.error is None and v.required_bytes > 0 and v.flops > 0 for v in o.options)
    nothing, dots, donate = o.options
    # recomputing the forward pass costs flops XLA counts; keeping the dots costs fewer
    assert nothing.extra_flops > 0 and nothing.extra_flops >= dots.extra_flops
    assert nothing.extra_flops == nothing.flops - base.flops
    # the gradients reuse the donated weights' buffers: less memory, same work
    assert donate.required_bytes < base.required_bytes and donate.extra_flops == 0
    assert donate.how == "jax.jit(f, donate_argnums=(0,))"
    assert (o.capacity_bytes, o.capacity_source) == (budget, "spec")
    assert all(v.fits for v in [base, *o.options]) and o.best() is not None
    data = o.to_json()
    assert data["baseline"]["required_bytes"] == {"value": base.required_bytes, "source": "XLA"}
    assert "remat: nothing_saveable" in o.text()


def test_largest_batch_is_extrapolated_from_two_compiles_and_confirmed(mlp):
    budget = mlp.memory_map.required_bytes * 4
    o = memory_options(mlp, capacity=budget, policies=(), donate=False)
    b = o.batch
    assert b is not None and b.argument == "x"
    (b1, y1), (b2, y2), (b3, y3) = b.tried
    assert (b1, b2) == (512, 1024) and y2 > y1
    assert b.per_example_bytes == pytest.approx((y2 - y1) / (b2 - b1))
    assert b3 == b.predicted == int(b1 + (budget - y1) / b.per_example_bytes)
    assert b.confirmed is (y3 <= budget) and b.largest == max(t for t, y in b.tried if y <= budget)
    assert b.largest >= 4 * b1  # activations dominate: 4x the budget holds >= 4x the batch


def test_a_chosen_batch_is_planned_without_allocating(mlp):
    o = memory_options(
        mlp, batch_size=4096, capacity=2**40, policies=(), donate=False, search_batch=False
    )
    # 8x the batch: XLA's allocation grows with it (the weights do not)
    assert o.baseline.required_bytes > 4 * mlp.memory_map.required_bytes


class Block(nnx.Module):
    def __init__(self, d, rngs):
        self.lin = nnx.Linear(d, d, rngs=rngs)

    def __call__(self, h):
        return h + jnp.tanh(self.lin(h))


class Net(nnx.Module):
    def __init__(self, d, depth, rngs):
        self.blocks = nnx.List([Block(d, rngs) for _ in range(depth)])

    def __call__(self, x):
        for block in self.blocks:
            x = block(x)
        return jnp.mean(x**2)


def test_nnx_layers_are_rematerialised_one_class_at_a_time():
    net = Net(64, 3, nnx.Rngs(0))
    c = nbcompile.compile(net, jnp.ones((256, 64)), grad=True)
    classes, how = remat_layers(c.adapted)
    assert classes == [Block] and how == "nnx.remat(Block.__call__)"
    original = Block.__dict__["__call__"]
    with layer_remat(classes):
        assert Block.__dict__["__call__"] is not original
    assert Block.__dict__["__call__"] is original
    o = memory_options(c, capacity=2**40, policies=(), donate=False, search_batch=False)
    (layer,) = o.options
    assert layer.name == "remat per layer (Block)" and layer.error is None
    # each block's forward is computed again in its backward step
    assert layer.extra_flops > 0


class EBlock(eqx.Module):
    lin: eqx.nn.Linear

    def __call__(self, h):
        return h + jnp.tanh(jax.vmap(self.lin)(h))


class ENet(eqx.Module):
    blocks: list

    def __call__(self, x):
        for block in self.blocks:
            x = block(x)
        return jnp.mean(x**2)


def test_equinox_layers_are_rematerialised():
    keys = jax.random.split(jax.random.key(1), 3)
    net = ENet([EBlock(eqx.nn.Linear(64, 64, key=k)) for k in keys])
    c = nbcompile.compile(net, jnp.ones((256, 64)), grad=True)
    o = memory_options(c, capacity=2**40, policies=(), donate=False, search_batch=False)
    (layer,) = o.options
    assert layer.name == "remat per layer (EBlock)" and layer.how.startswith(
        "eqx.filter_checkpoint"
    )
    assert layer.extra_flops > 0


def test_without_grad_there_is_nothing_to_rematerialise(mlp):
    fwd = nbcompile.compile(loss, *mlp.args)
    o = memory_options(fwd, capacity=2**40, search_batch=False)
    assert not any(v.name.startswith("remat") for v in o.options)
    assert any("--grad" in n for n in o.notes)
