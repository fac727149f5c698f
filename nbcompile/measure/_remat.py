"""Per-layer rematerialisation of a model's layer classes, for the duration of one trace.

A *layer class* is a module class of the user's own (not Flax's, Equinox's or Keras's) that the
model holds below its root, e.g. ``Block`` in ``Transformer.blocks``; when the model has none,
the classes of library modules held in a list (``layers: list[nnx.Linear]``). While
:func:`layer_remat` is active, calling such a layer runs its ``__call__`` under the library's
checkpoint transform (``nnx.remat`` / ``eqx.filter_checkpoint``), so its forward values are
recomputed in its own backward step instead of being kept. The patch is per class, restored
exactly on exit, and numerics are unchanged (remat recomputes the same ops).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["layer_remat", "remat_layers"]

_LIBRARIES = ("flax.", "equinox.", "keras.")
_LOCK = threading.RLock()


def _modules(adapted: Any) -> list[tuple[Any, list[Any], bool]]:
    """(root, submodules, in a list?) per model the adapted call holds."""
    out = []
    for model in getattr(adapted, "models", ()) or ():
        kind = getattr(adapted, "kind", "")
        if kind == "flax-nnx":
            from flax import nnx

            subs = [(path, m) for path, m in nnx.iter_modules(model) if m is not model]
            out.append(
                (
                    model,
                    [m for _, m in subs],
                    any(any(isinstance(p, int) for p in path) for path, _ in subs),
                )
            )
        elif kind == "equinox":
            from ..capture._models_eqx import _submodules

            subs = [m for _, m in _submodules(model) if m is not model]
            out.append((model, subs, True))
    return out


def remat_layers(adapted: Any) -> tuple[list[type], str] | None:
    """The layer classes to rematerialise and the code that does it, or None."""
    kind = getattr(adapted, "kind", "")
    for root, subs, _listed in _modules(adapted):
        own = [
            type(m)
            for m in subs
            if not type(m).__module__.startswith(_LIBRARIES) and type(m) is not type(root)
        ]
        classes = list(dict.fromkeys(own)) or list(
            dict.fromkeys(type(m) for m in subs if type(m) is not type(root))
        )
        # keep only the outermost: a layer class held inside another layer class is covered
        if classes:
            how = (
                "nnx.remat(Layer.__call__)"
                if kind == "flax-nnx"
                else "eqx.filter_checkpoint(Layer.__call__)"
            )
            outer = [
                k for k in classes if not any(k is not o and _holds(o, k, subs) for o in classes)
            ]
            return outer, how.replace("Layer", "/".join(k.__name__ for k in outer))
    return None


def _holds(outer: type, inner: type, subs: list[Any]) -> bool:
    import dataclasses

    for m in subs:
        if type(m) is outer and dataclasses.is_dataclass(m):
            for f in dataclasses.fields(m):
                if isinstance(getattr(m, f.name, None), inner):
                    return True
        if type(m) is outer and any(isinstance(v, inner) for v in vars(m).values()):
            return True
    return False


def _checkpointed(cls: type, original: Any) -> Any:
    module = cls.__module__
    if any(
        isinstance(base, type) and base.__module__.startswith("flax.nnx") for base in cls.__mro__
    ):
        from flax import nnx

        def nnx_call(self: Any, *args: Any, **kwargs: Any) -> Any:
            return nnx.remat(lambda m, *a: original(m, *a, **kwargs))(self, *args)

        return nnx_call
    import equinox as eqx

    def eqx_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        return eqx.filter_checkpoint(lambda m, *a: original(m, *a, **kwargs))(self, *args)

    del module
    return eqx_call


@contextlib.contextmanager
def layer_remat(classes: list[type]) -> Iterator[None]:
    """Rematerialise each class's ``__call__`` while the context is active."""
    saved: list[tuple[type, Any, bool]] = []
    with _LOCK:
        try:
            for cls in classes:
                own = "__call__" in cls.__dict__
                original = cls.__dict__["__call__"] if own else cls.__call__
                saved.append((cls, original, own))
                cls.__call__ = _checkpointed(cls, original)  # type: ignore[method-assign]
            yield
        finally:
            for cls, original, own in reversed(saved):
                if own:
                    cls.__call__ = original  # type: ignore[method-assign]
                else:
                    del cls.__call__
