"""Equinox adapter: a module is a pytree, partitioned into parameters, other arrays and the rest.

Parameters are the inexact (floating/complex) arrays, as ``eqx.filter_grad`` differentiates;
other arrays (integer buffers, PRNG keys as key data) are a second explicit input; everything else (activation
functions, sizes, flags) is static and stays in the program's structure. Imported only once an
Equinox object has been given.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import equinox as eqx
import jax

from ._models_keys import keys_as_data, keys_from_data
from ._models_scopes import format_path, module_scopes

__all__ = ["EqxSplit"]


def _submodules(root: Any) -> list[tuple[tuple[str, ...], Any]]:
    """``(path, module)`` for every Equinox module reachable through fields, lists and dicts."""
    found: list[tuple[tuple[str, ...], Any]] = []
    seen: set[int] = set()

    def walk(obj: Any, path: tuple[Any, ...]) -> None:
        if isinstance(obj, eqx.Module):
            if id(obj) in seen:
                return
            seen.add(id(obj))
            found.append(((type(root).__name__, *format_path(path)), obj))
            for f in dataclasses.fields(obj):
                walk(getattr(obj, f.name, None), (*path, f.name))
        elif isinstance(obj, list | tuple):
            for i, item in enumerate(obj):
                walk(item, (*path, i))
        elif isinstance(obj, dict):
            for key, item in obj.items():
                walk(item, (*path, key))

    walk(root, ())
    return found


class EqxSplit:
    """An Equinox module as (inexact arrays, other arrays, static structure)."""

    kind = "equinox"

    def __init__(self, model: Any) -> None:
        self.model = model
        self.name = type(model).__name__
        self.params, rest = eqx.partition(model, eqx.is_inexact_array)
        state, self.static = eqx.partition(rest, eqx.is_array)
        self.state, self._key_impls = keys_as_data(state)

    @contextlib.contextmanager
    def bound(self, params: Any, state: Any) -> Iterator[Any]:
        """The module rebuilt around ``params``/``state``, with module name scopes while in use."""
        module = eqx.combine(params, keys_from_data(state, self._key_impls), self.static)
        with module_scopes(_submodules(module)):
            yield module

    def structure(self) -> Any:
        """The static partition: tree structure plus every non-array leaf (``inference`` flags,
        activation functions, sizes) by value."""
        leaves, treedef = jax.tree.flatten(self.static)
        return ("equinox", treedef, tuple(leaves), self._key_impls)
