"""Reference models shared by the tests and the benchmark harness.

Each builder returns ``(fn, args)``: a plain function and example arguments, so callers can
``jax.jit(fn).trace(*args)``, time eager vs compiled, or analyse the compiled program. Models are
written for strict JAX settings (no implicit rank or dtype promotion) and use random weights so
that nothing is accidentally constant-folded away.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

__all__ = [
    "attention_block",
    "conv_net",
    "mlp",
    "transformer",
    "transformer_train_step",
]

Model = tuple[Callable[..., Any], tuple[Any, ...]]


def _dense_params(key: jax.Array, sizes: list[int], dtype: Any = jnp.float32) -> list[dict]:
    params = []
    keys = jax.random.split(key, len(sizes) - 1)
    for k, (n_in, n_out) in zip(keys, itertools.pairwise(sizes), strict=True):
        w = jax.random.normal(k, (n_in, n_out), dtype) / jnp.sqrt(jnp.asarray(n_in, dtype))
        params.append({"w": w, "b": jnp.zeros((n_out,), dtype)})
    return params


def mlp(batch: int = 32, sizes: tuple[int, ...] = (64, 128, 128, 10), seed: int = 0) -> Model:
    """A tanh MLP returning logits."""
    key = jax.random.key(seed)
    params = _dense_params(key, list(sizes))
    x = jax.random.normal(jax.random.fold_in(key, 1), (batch, sizes[0]))

    def predict(params, x):
        for layer in params[:-1]:
            x = jnp.tanh(x @ layer["w"] + layer["b"][None, :])
        return x @ params[-1]["w"] + params[-1]["b"][None, :]

    return predict, (params, x)


def _layer_norm(x: jax.Array, scale: jax.Array) -> jax.Array:
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mean) ** 2, axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * scale[None, :]


def _attention(p: dict, x: jax.Array, heads: int) -> jax.Array:
    seq, d = x.shape
    q = (x @ p["wq"]).reshape(seq, heads, d // heads)
    k = (x @ p["wk"]).reshape(seq, heads, d // heads)
    v = (x @ p["wv"]).reshape(seq, heads, d // heads)
    scores = jnp.einsum("qhd,khd->hqk", q, k) / jnp.sqrt(jnp.asarray(d // heads, x.dtype))
    weights = jax.nn.softmax(scores, axis=-1)
    out = jnp.einsum("hqk,khd->qhd", weights, v).reshape(seq, d)
    return out @ p["wo"]


def _block(p: dict, x: jax.Array, heads: int) -> jax.Array:
    x = x + _attention(p, _layer_norm(x, p["ln1"]), heads)
    h = jax.nn.gelu(_layer_norm(x, p["ln2"]) @ p["w1"])
    return x + h @ p["w2"]


def _block_params(key: jax.Array, d: int, dtype: Any = jnp.float32) -> dict:
    ks = jax.random.split(key, 6)
    scale = 1.0 / float(d) ** 0.5
    shapes = {"wq": (d, d), "wk": (d, d), "wv": (d, d), "wo": (d, d), "w1": (d, 4 * d)}
    p = {
        name: jax.random.normal(k, s, dtype) * scale
        for k, (name, s) in zip(ks, shapes.items(), strict=False)
    }
    p["w2"] = jax.random.normal(ks[5], (4 * d, d), dtype) * (scale / 2)
    p["ln1"] = jnp.ones((d,), dtype)
    p["ln2"] = jnp.ones((d,), dtype)
    return p


def attention_block(seq: int = 32, d: int = 64, heads: int = 4, seed: int = 0) -> Model:
    """One pre-norm transformer block (layernorm, softmax attention, gelu MLP)."""
    key = jax.random.key(seed)
    params = _block_params(key, d)
    x = jax.random.normal(jax.random.fold_in(key, 1), (seq, d))

    def block(params, x):
        return _block(params, x, heads)

    return block, (params, x)


def _stack_params(n_layers: int, d: int, seed: int) -> tuple[list[dict], jax.Array]:
    key = jax.random.key(seed)
    layers = [_block_params(k, d) for k in jax.random.split(key, n_layers)]
    head = jax.random.normal(jax.random.fold_in(key, 7), (d, d)) / float(d) ** 0.5
    return layers, head


def transformer(
    n_layers: int = 12, d: int = 512, seq: int = 64, heads: int = 8, seed: int = 0
) -> Model:
    """A stack of ``n_layers`` pre-norm blocks (unrolled) and a linear head; forward only."""
    params = _stack_params(n_layers, d, seed)
    x = jax.random.normal(jax.random.key(seed + 1), (seq, d))

    def forward(params, x):
        layers, head = params
        for p in layers:
            x = _block(p, x, heads)
        return _layer_norm(x, jnp.ones((d,), x.dtype)) @ head

    return forward, (params, x)


def transformer_train_step(
    n_layers: int = 12, d: int = 512, seq: int = 64, heads: int = 8, seed: int = 0
) -> Model:
    """One SGD step of :func:`transformer` on a mean-squared-error loss: (params, loss)."""
    forward, (params, x) = transformer(n_layers, d, seq, heads, seed)
    y = jax.random.normal(jax.random.key(seed + 2), (seq, d))

    def loss(params, x, y):
        return jnp.mean((forward(params, x) - y) ** 2)

    def train_step(params, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        new = jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads)
        return new, value

    return train_step, (params, x, y)


def transformer_scan_train_step(
    n_layers: int = 12, d: int = 512, seq: int = 64, heads: int = 8, seed: int = 0
) -> Model:
    """:func:`transformer_train_step` with the blocks' weights stacked and the stack run by one
    ``lax.scan`` over layers (XLA compiles one block, runs it ``n_layers`` times; its gradient
    is a reverse scan)."""
    layers, head = _stack_params(n_layers, d, seed)
    stacked = jax.tree.map(lambda *ws: jnp.stack(ws), *layers)
    x = jax.random.normal(jax.random.key(seed + 1), (seq, d))
    y = jax.random.normal(jax.random.key(seed + 2), (seq, d))

    def forward(params, x):
        stack, head = params

        def layer(x, p):
            return _block(p, x, heads), None

        x, _ = jax.lax.scan(layer, x, stack)
        return _layer_norm(x, jnp.ones((d,), x.dtype)) @ head

    def loss(params, x, y):
        return jnp.mean((forward(params, x) - y) ** 2)

    def train_step(params, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        new = jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads)
        return new, value

    return train_step, ((stacked, head), x, y)


def conv_net(batch: int = 4, size: int = 16, channels: int = 8, seed: int = 0) -> Model:
    """conv -> relu -> 2x2 max-pool -> conv -> relu -> global mean -> dense."""
    key = jax.random.key(seed)
    k1, k2, k3, k4 = jax.random.split(key, 4)
    params = {
        "c1": jax.random.normal(k1, (channels, 3, 3, 3)) * 0.2,
        "c2": jax.random.normal(k2, (channels, channels, 3, 3)) * 0.1,
        "w": jax.random.normal(k3, (channels, 10)) * 0.3,
    }
    x = jax.random.normal(k4, (batch, 3, size, size))

    def convnet(params, x):
        dn = ("NCHW", "OIHW", "NCHW")
        h = jax.lax.conv_general_dilated(x, params["c1"], (1, 1), "SAME", dimension_numbers=dn)
        h = jax.nn.relu(h)
        h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
        h = jax.lax.conv_general_dilated(h, params["c2"], (1, 1), "SAME", dimension_numbers=dn)
        h = jax.nn.relu(h)
        return jnp.mean(h, axis=(2, 3)) @ params["w"]

    return convnet, (params, x)
