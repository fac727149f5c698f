"""The class of each module of a model, by its module path (``Transformer/blocks_0`` -> ``Block``).

The view writes a module's class on its frame (``blocks_0 · Block``), where the model library
gives it: read from the live model objects a compilation adapted (``Adapted.models``), with the
paths the capture gives their name scopes (``capture/_models_scopes.py``: the root named after
its class, attribute names below it, list indices joined with ``_``). Flax NNX (its module
graph) and Equinox (its fields, lists and dicts); Flax Linen and Keras already name their scopes
after their layers (``Dense_0``, ``conv2d``), so they add nothing here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["module_classes"]

#: a model with more modules than this gets no classes (a report stays small)
MAX_MODULES = 2_000


def module_classes(models: Iterable[Any]) -> dict[str, str]:
    """``{module path: class name}`` of every module of ``models`` whose library gives it;
    empty for plain functions, other libraries and on any failure to walk a model (the frames
    then say ``scope``, as before)."""
    from ..capture.models import model_kind

    out: dict[str, str] = {}
    for model in models:
        try:
            kind = model_kind(model)
            if kind == "flax-nnx":
                pairs = _nnx(model)
            elif kind == "equinox":
                pairs = _equinox(model)
            else:
                continue
            for path, module in pairs:
                out.setdefault("/".join(path), type(module).__name__)
                if len(out) > MAX_MODULES:
                    return {}
        except Exception:  # a model the walk does not understand: no classes, nothing breaks
            continue
    return out


def _nnx(model: Any) -> list[tuple[tuple[str, ...], Any]]:
    from flax import nnx

    from ..capture._models_scopes import format_path

    if not isinstance(model, nnx.Module):
        return []
    root = type(model).__name__
    return [((root, *format_path(path)), sub) for path, sub in nnx.iter_modules(model)]


def _equinox(model: Any) -> list[tuple[tuple[str, ...], Any]]:
    from ..capture._models_eqx import _submodules

    return _submodules(model)
