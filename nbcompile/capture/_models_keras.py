"""Keras 3 adapter (JAX backend): variables become explicit inputs via Keras' stateless API.

Keras already opens a ``jax.named_scope`` per layer (named by ``layer.name``); the model's own
name is added on top so paths read ``my_model/encoder/dense1``. Imported only once a Keras object
has been given.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import jax
import keras

from ..errors import CaptureError

__all__ = ["KerasSplit"]


def _by_path(variables: list[Any], values: list[Any]) -> dict[str, Any] | list[Any]:
    paths = [v.path for v in variables]
    if len(set(paths)) == len(paths):
        return dict(zip(paths, values, strict=True))
    return list(values)


def _ordered(variables: list[Any], values: Any) -> list[Any]:
    if isinstance(values, dict):
        return [values[v.path] for v in variables]
    return list(values)


class KerasSplit:
    """A Keras layer/model as (trainable values, non-trainable values) keyed by variable path."""

    kind = "keras"

    def __init__(self, model: Any) -> None:
        if keras.backend.backend() != "jax":
            raise CaptureError(
                f"Keras is using the {keras.backend.backend()!r} backend, not JAX",
                code="NBC112",
                hint="set os.environ['KERAS_BACKEND'] = 'jax' before the first `import keras` "
                "(restart the kernel)",
            )
        if not model.built:
            raise CaptureError(
                f"the Keras model {model.name!r} has not been built (it has no weights yet)",
                code="NBC112",
                hint="call it once on example data, or give it a keras.Input, before compiling",
            )
        self.model = model
        self.name = model.name
        self.trainable = list(model.trainable_variables)
        self.non_trainable = list(model.non_trainable_variables)
        self.params = _by_path(self.trainable, [v.value for v in self.trainable])
        self.state = _by_path(self.non_trainable, [v.value for v in self.non_trainable])

    def call(self, params: Any, state: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        """``model(*args)`` through ``stateless_call``; the outputs only."""
        if method not in ("__call__", "call"):
            raise CaptureError(
                f"cannot compile Keras' {self.name}.{method}(...)",
                code="NBC112",
                hint="compile the model call itself, e.g. `model(x)` (predict/fit run eagerly)",
            )
        trainable = _ordered(self.trainable, params)
        non_trainable = _ordered(self.non_trainable, state)
        with jax.named_scope(self.name):
            outputs, _ = self.model.stateless_call(trainable, non_trainable, *args, **kwargs)
        return outputs

    @contextlib.contextmanager
    def bound(self, params: Any, state: Any) -> Iterator[Any]:
        """The model itself, reading ``params``/``state`` instead of its variables while in use."""
        mapping = list(zip(self.trainable, _ordered(self.trainable, params), strict=True))
        mapping += zip(self.non_trainable, _ordered(self.non_trainable, state), strict=True)
        with keras.StatelessScope(state_mapping=mapping):
            yield self.model

    def structure(self) -> Any:
        """Layer classes, names, trainable flags and configs, and the variables' paths, shapes
        and dtypes: what changes the traced program. Values are inputs, never part of it."""
        layers = []
        for layer in self.model._flatten_layers(
            include_self=True
        ):  # private in Keras 3 (checked 3.15)
            try:
                config = repr(sorted(layer.get_config().items()))
            except NotImplementedError:  # subclassed layers without get_config
                config = None
            layers.append((type(layer).__qualname__, layer.name, layer.trainable, config))
        variables = [
            (v.path, tuple(v.shape), str(v.dtype), v.trainable)
            for v in self.trainable + self.non_trainable
        ]
        return ("keras", tuple(layers), tuple(variables))
