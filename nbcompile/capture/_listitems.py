"""A plain function held in a model's list, named by its place there: ``layers_2 (relu)``.

Equinox's MLP idiom keeps functions beside modules in one list and calls them from a loop::

    self.layers = [eqx.nn.Linear(...), jax.nn.relu, eqx.nn.Linear(...)]
    ...
    for layer in self.layers:
        x = layer(x)

The modules get their list place as their name (``layers_0``: ``_models_scopes``); a function
would get the loop variable's (``layer``, ``layer#2``), which says nothing of which item ran.
:class:`ListItems` names such a call as its neighbours are named, plus the function's own name:
``layers_2 (relu)``. It applies where the caller is a method of a Flax (NNX or Linen) or
Equinox module calling a local variable that holds an item of one of its list/tuple attributes
(``nnx.List`` included): those libraries name modules by attribute path, so the item's place
reads like the modules beside it. Keras names layers by their own names (``dense_1``), not by
attribute paths, so its lists are left alone.

A function held twice (``relu`` at 2 and 7) is told apart by order: each list keeps the index
last named, and the next call takes the first place after it (a list runs in order; a second
pass starts again at the front).
"""

from __future__ import annotations

import dis
import itertools
import linecache
from collections.abc import Sequence
from typing import Any

__all__ = ["ListItems"]

_LIBS = ("flax", "equinox")
_CACHE = dis.opmap.get("CACHE", 0)


class ListItems:
    """The places named so far in one recording (by list), to tell repeated items apart."""

    def __init__(self) -> None:
        # (id(owner), attribute) -> (owner, the index last named): the owner is held, so its
        # id stays its own for the recording
        self.last: dict[tuple[int, str], tuple[Any, int]] = {}

    def name(self, caller: Any, name: str) -> str | None:
        """``layers_2 (relu)`` where ``caller`` calls the local ``name`` holding an item of a
        list attribute of its module; None otherwise."""
        code = caller.f_code
        if not (code.co_argcount and code.co_varnames[0] == "self"):
            return None
        if name not in code.co_varnames and name not in code.co_cellvars:
            return None
        if not _calls_bare_name(code, caller.f_lasti, name):
            return None  # ``self.layer(x)`` beside a local ``layer``: another object
        local = caller.f_locals
        owner, obj = local.get("self"), local.get(name)
        if obj is None or not _library_module(owner):
            return None
        try:
            attrs = vars(owner)
        except TypeError:
            return None
        places = [
            (attr, i)
            for attr, value in attrs.items()
            if not attr.startswith("_") and _is_list(value)
            for i, item in enumerate(value)
            if item is obj
        ]
        if not places:
            return None
        place = next(
            (p for p in places if p[1] > self._last(owner, p[0])),
            places[0],
        )
        self.last[(id(owner), place[0])] = (owner, place[1])
        fn = _function_name(obj)
        where = f"{place[0]}_{place[1]}"
        return f"{where} ({fn})" if fn else where

    def _last(self, owner: Any, attr: str) -> int:
        hit = self.last.get((id(owner), attr))
        return hit[1] if hit is not None and hit[0] is owner else -1


def _library_module(owner: Any) -> bool:
    if owner is None:
        return False
    for klass in type(owner).__mro__:
        module = getattr(klass, "__module__", "") or ""
        if module.split(".", 1)[0] in _LIBS:
            return True
    return False


def _is_list(value: Any) -> bool:
    """A list or tuple, or a library's list (``nnx.List``): a sequence that is not text."""
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def _function_name(obj: Any) -> str | None:
    """``relu`` for ``jax.nn.relu`` (a ``custom_jvp``), ``sigmoid`` for a jitted function, the
    function of a ``functools.partial``; None for a lambda or an object without a name."""
    for _ in range(4):
        inner = getattr(obj, "func", None)
        if inner is None or not callable(inner):
            break
        obj = inner
    name = getattr(obj, "__name__", None)
    if not isinstance(name, str) or not name or name.startswith("<"):
        return None
    return name


def _calls_bare_name(code: Any, lasti: int, name: str) -> bool:
    """Whether the call at ``lasti`` is written as ``name(...)`` (a bare name, not an attribute
    or a subscript ending in that name)."""
    raw = code.co_code
    # 3.11 and 3.12: while a call runs, f_lasti is the call's last cache entry; 3.13: the call
    while 0 < lasti < len(raw) and raw[lasti] == _CACHE:
        lasti -= 2
    try:
        line, _end, col, _end_col = next(itertools.islice(code.co_positions(), lasti // 2, None))
    except (StopIteration, ValueError):
        return False
    if line is None or col is None:
        return False
    text = linecache.getline(code.co_filename, line)[col:]
    return text.startswith(name) and text[len(name) :].lstrip().startswith("(")
