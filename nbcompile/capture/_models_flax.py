"""Flax adapters: NNX modules (split/merge) and Linen modules (apply with explicit variables).

Imported only once a Flax object has been given (``models.adapt`` checks first), so importing
nbcompile never imports Flax.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import flax.linen as nn
import jax
from flax import nnx

from ..errors import CaptureError
from ._models_keys import keys_as_data, keys_from_data
from ._models_scopes import format_path, module_scopes

__all__ = ["LinenSplit", "NnxSplit"]


class NnxSplit:
    """An NNX module as (graph definition, ``nnx.Param`` state, every other state).

    The non-parameter state (BatchNorm statistics, RNG keys and counts, ...) is kept as a
    separate explicit input rather than baked into the program; RNG keys travel as key data.
    """

    kind = "flax-nnx"

    def __init__(self, model: Any) -> None:
        self.model = model
        self.name = type(model).__name__
        self.graphdef, self.params, state = nnx.split(model, nnx.Param, ...)
        self.state, self._key_impls = keys_as_data(state)

    @contextlib.contextmanager
    def bound(self, params: Any, state: Any) -> Iterator[Any]:
        """A fresh module holding ``params``/``state``, with module name scopes while in use."""
        # nnx.merge keeps the Variable objects it is given, and a Variable may only be mutated
        # at the trace level it was created at. Arguments a transform passes through untouched
        # (the state under jax.value_and_grad, BatchNorm statistics) still hold Variables of an
        # outer trace: rebuilding the trees here makes every Variable belong to this trace.
        params, state = jax.tree.map(lambda leaf: leaf, (params, state))
        module = nnx.merge(self.graphdef, params, keys_from_data(state, self._key_impls))
        if not isinstance(module, nnx.Module):  # nnx.Rngs and other graph nodes: no scopes
            yield module
            return
        named = [((self.name, *format_path(path)), sub) for path, sub in nnx.iter_modules(module)]
        with module_scopes(named):
            yield module

    def structure(self) -> Any:
        """Everything but array values: the graph definition holds the module tree and every
        non-Variable attribute (``deterministic``, ``use_running_average``, sizes...)."""
        return ("nnx", self.graphdef, self._key_impls)


def training_layers(model: Any) -> list[str]:
    """``model``'s NNX layers still in training mode, as ``"path (Class)"``: a ``Dropout`` that
    drops (``deterministic=False``, rate > 0) or a ``BatchNorm`` on batch statistics
    (``use_running_average=False``). ``model.eval()`` switches both off."""
    found = []
    for path, sub in nnx.iter_modules(model):
        name = ".".join(str(p) for p in path) or type(sub).__name__
        if isinstance(sub, nnx.Dropout) and not sub.deterministic and sub.rate > 0:
            found.append(f"{name} (Dropout)")
        elif isinstance(sub, nnx.BatchNorm) and not sub.use_running_average:
            found.append(f"{name} (BatchNorm)")
    return found


def _split_variables(variables: Any) -> tuple[Any, dict[str, Any]]:
    if not isinstance(variables, Mapping):
        raise CaptureError(
            "model.apply needs the variables dict as its first argument",
            code="NBC113",
            hint="call it as model.apply(variables, x) with variables = model.init(key, x)",
        )
    rest = {k: v for k, v in variables.items() if k != "params"}
    return variables.get("params", {}), rest


class LinenSplit:
    """A Linen call as ``call(params, state, *args, **kwargs)`` with explicit variables.

    ``target`` is ``module.apply``, a bound module (``module.bind(variables)``) or a method of a
    bound module. Linen names submodule calls itself (``named_call``); it is switched on while
    tracing so the name stack holds ``Model/attn/q_proj`` whatever the global setting.
    """

    kind = "flax-linen"

    def __init__(self, target: Any, args: tuple) -> None:
        method_name: str | None
        if isinstance(target, nn.Module):
            module, method_name = target, "__call__"
        else:
            module, method_name = target.__self__, target.__name__
        if method_name == "apply":
            if not args:
                raise CaptureError(
                    "model.apply was called without variables",
                    code="NBC113",
                    hint="call it as model.apply(variables, x)",
                )
            variables, unbound, method = args[0], module, None
        elif module.scope is None:
            raise CaptureError(
                f"{type(module).__name__} is a Flax Linen module with no variables bound",
                code="NBC112",
                hint="call model.apply(variables, x), or bind it first: model.bind(variables)(x)",
            )
        else:
            unbound, variables = module.unbind()
            method = None if method_name == "__call__" else method_name
        self.model = unbound
        self.name = type(unbound).__name__
        self.params, self.state = _split_variables(variables)
        self._has_params = "params" in variables
        self._method = method

    def call(self, p: Any, s: Any, *a: Any, **kw: Any) -> Any:
        extra = {} if self._method is None else {"method": self._method}
        merged = {"params": p, **s} if self._has_params else dict(s)
        with nn.override_named_call(True):
            return self.model.apply(merged, *a, **extra, **kw)

    def structure(self) -> Any:
        """A Linen module is a frozen dataclass of its hyperparameters (hashable, comparable)."""
        return ("linen", self.model, self._method, self._has_params)
