"""Bridge from "what the cell called" to a pure function of arrays.

Plain functions pass through; model objects (Flax, Equinox, Keras) go through
:mod:`nbcompile.capture.models`, which makes their parameters explicit inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class AdaptedCall:
    """``fn(*args, **kwargs)`` is the program to compile."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    params_argnums: tuple[int, ...] = ()
    weights_argnums: tuple[int, ...] = ()  # params + state: what freezing stores as weights
    kind: str = "function"
    name: str | None = None
    model: Any = None  # the library object (for models), else None

    rebindable: bool = True  # fn is what the cell called, so its jit can replace it

    @property
    def is_model(self) -> bool:
        return self.kind != "function"


def adapt_target(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> AdaptedCall:
    """Make ``fn(*args, **kwargs)`` a pure function of arrays (models: params as inputs)."""
    __tracebackhide__ = True
    try:
        from .models import adapt
    except ImportError:  # the model adapters are optional at this layer
        adapt = None
    if adapt is not None:
        ad = adapt(fn, args, kwargs)
        if ad.kind != "function":
            return AdaptedCall(
                fn=ad.fn, args=tuple(ad.args), kwargs=dict(ad.kwargs),
                params_argnums=tuple(ad.params_argnums),
                weights_argnums=tuple(ad.weights_argnums), kind=ad.kind, name=ad.name,
                model=fn, rebindable=False,
            )
        changed = len(ad.args) != len(args) or any(a is not b for a, b in zip(ad.args, args, strict=False))
        if ad.fn is not fn or changed:
            # a model passed as an argument was split into (static part, params)
            return AdaptedCall(
                fn=ad.fn, args=tuple(ad.args), kwargs=dict(ad.kwargs),
                params_argnums=tuple(ad.params_argnums),
                weights_argnums=tuple(ad.weights_argnums), kind="function", name=ad.name,
                rebindable=False,
            )
    return AdaptedCall(fn=fn, args=tuple(args), kwargs=dict(kwargs), name=None)
