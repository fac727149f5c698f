"""Small reference models for the freeze tests (random weights, fixed seeds)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def _normal(rng: np.random.Generator, *shape: int, scale: float = 0.2) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def mlp(params: dict[str, Any], x: jax.Array) -> jax.Array:
    h = jax.nn.gelu(x @ params["w1"] + params["b1"][None, :])
    return h @ params["w2"] + params["b2"][None, :]


def conv_net(params: dict[str, Any], x: jax.Array) -> jax.Array:
    y = jax.lax.conv_general_dilated(
        x,
        params["kernel"],
        window_strides=(1, 1),
        padding="SAME",
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )
    y = jax.nn.relu(y + params["bias"][None, None, None, :])
    return jnp.mean(y, axis=(1, 2)) @ params["head"]


def attention(params: dict[str, Any], x: jax.Array) -> dict[str, jax.Array]:
    q, k, v = (x @ params[n] for n in ("wq", "wk", "wv"))
    scores = q @ jnp.swapaxes(k, -1, -2) / jnp.sqrt(jnp.float32(q.shape[-1]))
    weights = jax.nn.softmax(scores, axis=-1)
    out = (weights @ v) @ params["wo"]
    mean = jnp.mean(out, axis=-1, keepdims=True)
    var = jnp.var(out, axis=-1, keepdims=True)
    return {
        "out": (out - mean) * jax.lax.rsqrt(var + 1e-5) * params["scale"][None, None, :],
        "attn": weights,
    }


def make(kind: str, seed: int = 0) -> tuple[Callable[..., Any], dict[str, Any], np.ndarray]:
    """(function, params, example input) for 'mlp', 'conv' or 'attention'."""
    rng = np.random.default_rng(seed)
    if kind == "mlp":
        params = {
            "w1": _normal(rng, 32, 64),
            "b1": _normal(rng, 64),
            "w2": _normal(rng, 64, 10),
            "b2": _normal(rng, 10),
        }
        return mlp, params, _normal(rng, 4, 32, scale=1.0)
    if kind == "conv":
        params = {
            "kernel": _normal(rng, 3, 3, 3, 8),
            "bias": _normal(rng, 8),
            "head": _normal(rng, 8, 5),
        }
        return conv_net, params, _normal(rng, 2, 12, 12, 3, scale=1.0)
    if kind == "attention":
        d = 32
        params = {n: _normal(rng, d, d) for n in ("wq", "wk", "wv", "wo")}
        params["scale"] = _normal(rng, d, scale=1.0)
        return attention, params, _normal(rng, 2, 16, d, scale=1.0)
    raise ValueError(kind)
