"""Typed PRNG keys in model state as plain ``uint32`` key data, and back.

Model state often holds typed keys (NNX ``RngKey`` variables, keys stored in Equinox modules).
Passing their raw key data instead keeps every program input a plain numeric array, which
``jax.export``, safetensors weight files and the views all handle; the adapted function wraps
the data back into keys of the same implementation before the model sees them.
"""

from __future__ import annotations

from typing import Any

import jax

__all__ = ["keys_as_data", "keys_from_data"]


def _is_key(leaf: Any) -> bool:
    dtype = getattr(leaf, "dtype", None)
    return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def keys_as_data(tree: Any) -> tuple[Any, tuple[Any, ...]]:
    """``tree`` with typed keys replaced by their key data, and each leaf's key impl (or None)."""
    leaves, treedef = jax.tree.flatten(tree)
    impls = tuple(jax.random.key_impl(leaf) if _is_key(leaf) else None for leaf in leaves)
    if not any(impls):
        return tree, impls
    data = [
        jax.random.key_data(leaf) if impl else leaf
        for leaf, impl in zip(leaves, impls, strict=True)
    ]
    return jax.tree.unflatten(treedef, data), impls


def keys_from_data(tree: Any, impls: tuple[Any, ...]) -> Any:
    """Inverse of :func:`keys_as_data`."""
    if not any(impls):
        return tree
    leaves, treedef = jax.tree.flatten(tree)
    keys = [
        jax.random.wrap_key_data(leaf, impl=impl) if impl else leaf
        for leaf, impl in zip(leaves, impls, strict=True)
    ]
    return jax.tree.unflatten(treedef, keys)
