"""A GPT-2 train step written the way picoGPT writes GPT-2: small pure functions, one Python loop
over attention heads. Benchmark and test data for "analysis at real scale" (issue 17).

The model functions follow the structure of Jay Mody's picoGPT (https://github.com/jaykmody/picoGPT,
``gpt2.py``, MIT licence): ``gelu``, ``softmax``, ``layer_norm``, ``linear``, ``ffn``,
``attention``, ``mha`` (a per-head Python loop), ``transformer_block`` and ``gpt2``; ported from
NumPy to ``jax.numpy`` here (strict dtype rules: explicit float32 constants), plus a
cross-entropy loss and an SGD train step. The per-head loop is the point: it makes many small
kernels (GPT-2 small, 12 layers: ~9,800 jaxpr equations -> ~4,500 XLA:CPU kernels).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["gpt2_forward", "gpt2_loss", "gpt2_train_step"]

Model = tuple[Callable[..., Any], tuple[Any, ...]]


def gelu(x):
    return 0.5 * x * (1 + jnp.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def softmax(x):
    exp_x = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))
    return exp_x / jnp.sum(exp_x, axis=-1, keepdims=True)


def layer_norm(x, g, b, eps: float = 1e-5):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    variance = jnp.var(x, axis=-1, keepdims=True)
    x = (x - mean) / jnp.sqrt(variance + eps)
    return g * x + b


def linear(x, w, b):
    return x @ w + b


def ffn(x, c_fc, c_proj):
    a = gelu(linear(x, **c_fc))
    return linear(a, **c_proj)


def attention(q, k, v, mask):
    return softmax(q @ k.T / math.sqrt(q.shape[-1]) + mask) @ v


def mha(x, c_attn, c_proj, n_head):
    x = linear(x, **c_attn)
    qkv = jnp.split(x, 3, axis=-1)
    qkv_heads = [jnp.split(part, n_head, axis=-1) for part in qkv]
    causal_mask = (1 - jnp.tri(x.shape[0], dtype=x.dtype)) * -1e10
    out_heads = [attention(q, k, v, causal_mask) for q, k, v in zip(*qkv_heads, strict=True)]
    x = jnp.hstack(out_heads)
    return linear(x, **c_proj)


def transformer_block(x, mlp, attn, ln_1, ln_2, n_head):
    x = x + mha(layer_norm(x, **ln_1), **attn, n_head=n_head)
    return x + ffn(layer_norm(x, **ln_2), **mlp)


def gpt2(inputs, wte, wpe, blocks, ln_f, n_head):
    x = wte[inputs] + wpe[jnp.arange(inputs.shape[0])]
    for block in blocks:
        x = transformer_block(x, **block, n_head=n_head)
    return layer_norm(x, **ln_f) @ wte.T


def _params(n_layer: int, d: int, vocab: int, n_ctx: int, seed: int) -> dict[str, Any]:
    keys = iter(jax.random.split(jax.random.key(seed), 4 + 4 * n_layer))

    def normal(*shape: int) -> jax.Array:
        return jax.random.normal(next(keys), shape, jnp.float32) * 0.02

    def dense(n_in: int, n_out: int) -> dict[str, jax.Array]:
        return {"w": normal(n_in, n_out), "b": jnp.zeros((n_out,), jnp.float32)}

    def norm() -> dict[str, jax.Array]:
        return {"g": jnp.ones((d,), jnp.float32), "b": jnp.zeros((d,), jnp.float32)}

    blocks = [
        {
            "mlp": {"c_fc": dense(d, 4 * d), "c_proj": dense(4 * d, d)},
            "attn": {"c_attn": dense(d, 3 * d), "c_proj": dense(d, d)},
            "ln_1": norm(),
            "ln_2": norm(),
        }
        for _ in range(n_layer)
    ]
    return {"wte": normal(vocab, d), "wpe": normal(n_ctx, d), "blocks": blocks, "ln_f": norm()}


def gpt2_forward(
    n_layer: int = 12,
    d: int = 768,
    n_head: int = 12,
    vocab: int = 2048,
    n_ctx: int = 64,
    seed: int = 0,
) -> Model:
    """picoGPT's ``gpt2`` forward: (params, token ids) -> logits."""
    params = _params(n_layer, d, vocab, n_ctx, seed)
    tokens = jax.random.randint(jax.random.key(seed + 1), (n_ctx,), 0, vocab)

    def forward(params, tokens):
        return gpt2(tokens, **params, n_head=n_head)

    return forward, (params, tokens)


def gpt2_loss(
    n_layer: int = 12,
    d: int = 768,
    n_head: int = 12,
    vocab: int = 2048,
    n_ctx: int = 64,
    seed: int = 0,
) -> Model:
    """Next-token cross-entropy of :func:`gpt2_forward`: (params, tokens) -> loss."""
    forward, (params, _) = gpt2_forward(n_layer, d, n_head, vocab, n_ctx, seed)
    # n_ctx + 1 tokens: the model reads the first n_ctx and predicts the last n_ctx
    tokens = jax.random.randint(jax.random.key(seed + 1), (n_ctx + 1,), 0, vocab)

    def loss_fn(params, tokens):
        logits = forward(params, tokens[:-1])
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, tokens[1:, None], axis=-1))

    return loss_fn, (params, tokens)


def gpt2_train_step(
    n_layer: int = 12,
    d: int = 768,
    n_head: int = 12,
    vocab: int = 2048,
    n_ctx: int = 64,
    seed: int = 0,
) -> Model:
    """One SGD step of next-token cross-entropy: (params, tokens) -> (new params, loss)."""
    loss_fn, args = gpt2_loss(n_layer, d, n_head, vocab, n_ctx, seed)

    def train_step(params, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
        new = jax.tree.map(lambda p, g: p - 1e-4 * g, params, grads)
        return new, loss

    return train_step, args
