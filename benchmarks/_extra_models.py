"""Benchmark-only models and the name -> builder registry the harness and its workers share.

The reference models live in :mod:`benchmarks.models` (owned by the analysis tests); this file
adds the few the harness needs on top (a tiny element-wise function) and names every model the
table shows, so a fresh worker process can rebuild exactly the same model from its name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from benchmarks import _gpt2, models

__all__ = ["MODELS", "build", "tiny"]

Model = tuple[Callable[..., Any], tuple[Any, ...]]


def tiny(n: int = 8, seed: int = 0) -> Model:
    """``x * 2 + 1`` on a few floats: nothing to compute, so a call is all dispatch."""
    x = jax.random.normal(jax.random.key(seed), (n,))

    def tiny_fn(x):
        return x * jnp.asarray(2.0, x.dtype) + jnp.asarray(1.0, x.dtype)

    return tiny_fn, (x,)


#: table name -> builder (each call returns fresh function objects and fresh arrays)
MODELS: dict[str, Callable[[], Model]] = {
    "tiny fn": tiny,
    "MLP": models.mlp,
    "attention block": models.attention_block,
    "conv net": models.conv_net,
    "2-layer fwd d256": lambda: models.transformer(n_layers=2, d=256, seq=64, heads=4),
    "2-layer fwd": lambda: models.transformer(n_layers=2),
    "2-layer train": lambda: models.transformer_train_step(n_layers=2),
    "12-layer fwd": lambda: models.transformer(n_layers=12),
    "12-layer train": lambda: models.transformer_train_step(n_layers=12),
    "24-layer train": lambda: models.transformer_train_step(n_layers=24),
    # the same 12 blocks as one lax.scan over stacked weights (issue 43: loops)
    "12-layer scan train": lambda: models.transformer_scan_train_step(n_layers=12),
    # --quick: the same code paths at toy sizes
    "1-layer fwd d32": lambda: models.transformer(n_layers=1, d=32, seq=8, heads=2),
    "1-layer train d32": lambda: models.transformer_train_step(n_layers=1, d=32, seq=8, heads=2),
    # picoGPT-style GPT-2 (a Python loop over heads: many small kernels), benchmarks/_gpt2.py
    "GPT-2 small train": lambda: _gpt2.gpt2_train_step(n_layer=12),
    "GPT-2 24-layer train": lambda: _gpt2.gpt2_train_step(n_layer=24),
    "GPT-2 1-layer train d64": lambda: _gpt2.gpt2_train_step(
        n_layer=1, d=64, n_head=4, vocab=256, n_ctx=16
    ),
}


def build(name: str) -> Model:
    """Build the named model afresh (new closure, new arrays)."""
    try:
        return MODELS[name]()
    except KeyError:
        raise KeyError(f"unknown benchmark model {name!r}; known: {', '.join(MODELS)}") from None
