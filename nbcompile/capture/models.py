"""Models as people write them -> one pure function with explicit parameters.

:func:`adapt` turns the callable of a ``%%compile`` cell and its example arguments into an
:class:`Adapted`: a function safe to ``jax.jit`` whose parameters and state are *inputs* of the
compiled program (never constants baked into it), plus which arguments are parameters.

===================  ==========================================  ==================================
target               ``ad.fn`` / ``ad.args``                      parameters / state
===================  ==========================================  ==================================
plain function,      the target itself, the call's arguments      () — unless an argument is a
jit, partial                                                      model: then that argument becomes
                                                                  its parameters (same position)
                                                                  and its state is appended
Flax NNX module      ``fn(params, state, *arrays)``               ``nnx.Param`` / other variables
Flax Linen           ``fn(params, collections, *arrays)``         ``variables["params"]`` / rest
Equinox module       ``fn(params, state, *arrays)``               inexact arrays / other arrays
Keras 3 (JAX)        ``fn(trainable, non_trainable, *arrays)``    via ``stateless_call``
===================  ==========================================  ==================================

For model targets, call arguments that hold no array (``train=False``, ``method=...``) are
static: they are fixed in the program, not inputs; keyword arguments holding arrays are passed as
one trailing dict argument. Module names enter the jaxpr name stack (``Model/blocks_0/attn``),
see ``_models_scopes``. Flax, Equinox and Keras are imported only when such an object is given;
an object of a library that cannot be imported raises :class:`MissingLibraryError`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

from ..errors import CaptureError
from ._models_scopes import module_paths, scope_path

__all__ = ["Adapted", "MissingLibraryError", "adapt", "model_kind", "module_paths", "scope_path"]


class MissingLibraryError(CaptureError):
    """The target (or an argument) is a model of a library that is not installed."""

    default_code = "NBC112"


# kind -> (module prefixes of its classes, module to import, base class name there, extra, label)
_LIBRARIES: dict[str, tuple[tuple[str, ...], str, str, str, str]] = {
    "flax-nnx": (("flax.nnx", "flax.experimental.nnx"), "flax.nnx", "Module", "flax", "Flax NNX"),
    "flax-linen": (("flax.linen",), "flax.linen", "Module", "flax", "Flax Linen"),
    "equinox": (("equinox",), "equinox", "Module", "equinox", "Equinox"),
    "keras": (("keras",), "keras", "Layer", "keras", "Keras"),
}

# Looked up at call time so tests can simulate a library that is not installed.
_import_module = importlib.import_module


def _library_of(cls: type) -> str | None:
    """The kind whose module prefixes one of ``cls``'s bases lives under (no import)."""
    for klass in cls.__mro__:
        module = getattr(klass, "__module__", "") or ""
        for kind, (prefixes, *_rest) in _LIBRARIES.items():
            if any(module == p or module.startswith(p + ".") for p in prefixes):
                return kind
    return None


def _require(kind: str) -> Any:
    _prefixes, module, _base, extra, label = _LIBRARIES[kind]
    try:
        return _import_module(module)
    except ImportError as err:
        raise MissingLibraryError(
            f"this is a {label} model, but {module.split('.')[0]} cannot be imported ({err})",
            hint=f"pip install nbcompile[{extra}]",
        ) from err


def model_kind(obj: Any) -> str | None:
    """``"flax-nnx"``, ``"flax-linen"``, ``"equinox"``, ``"keras"`` for a model object, else None.

    Raises :class:`MissingLibraryError` when ``obj``'s class comes from such a library but the
    library cannot be imported.
    """
    kind = _library_of(type(obj))
    if kind is None:
        return None
    library = _require(kind)
    base = getattr(library, _LIBRARIES[kind][2], None)
    if base is None and kind == "keras":
        base = library.layers.Layer
    if base is None or not isinstance(obj, base):
        return None
    if kind == "equinox" and not _holds_arrays(obj):
        return None  # a wrapper such as eqx.filter_jit(f), or a module with no arrays
    return kind


def _is_array_like(x: Any) -> bool:
    return isinstance(x, jax.Array | np.ndarray | np.generic | jax.ShapeDtypeStruct)


def _holds_arrays(value: Any) -> bool:
    return any(_is_array_like(leaf) for leaf in jax.tree.leaves(value, is_leaf=_is_array_like))


@dataclass(frozen=True)
class Adapted:
    """A pure, jit-safe function over the example arguments, parameters explicit.

    Call it as ``fn(*args, **kwargs)``; ``kwargs`` is empty except for plain functions, whose
    keyword arguments are passed through. ``params_argnums`` are the parameter arguments (for
    gradients), ``state_argnums`` the other model state (BatchNorm statistics, RNG state): weights
    to freeze are ``params_argnums + state_argnums``.
    """

    fn: Callable[..., Any]
    args: tuple
    params_argnums: tuple[int, ...]
    kind: str
    name: str
    state_argnums: tuple[int, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    arg_names: tuple[str, ...] = ()
    _rebind: Callable[[Any], Any] | None = field(default=None, repr=False)
    _update: Callable[..., Any] | None = field(default=None, repr=False)

    @property
    def weights_argnums(self) -> tuple[int, ...]:
        """Arguments holding trained values (parameters and state): what a frozen model stores."""
        return tuple(sorted(self.params_argnums + self.state_argnums))

    def rebind(self, compiled_fn: Any) -> Any:
        """What the cell's name should be bound to after compiling: None for models (left alone).

        For a plain function: ``compiled_fn`` itself. For a function whose arguments include
        models: a function with the original signature that splits the models and calls
        ``compiled_fn`` (which must be ``jax.jit(self.fn)``-like).
        """
        return None if self._rebind is None else self._rebind(compiled_fn)

    def update_from(self, *params: Any) -> Any:
        """Write new values of the ``params_argnums`` arguments back into the model(s).

        NNX and Keras models are updated in place and returned; Equinox modules are immutable,
        so a new module is returned; for Linen the new variables dict is returned. Returns None
        when there is no model (plain functions).
        """
        return None if self._update is None else self._update(*params)


def _splitter(kind: str, model: Any) -> Any:
    if kind == "flax-nnx":
        from ._models_flax import NnxSplit

        return NnxSplit(model)
    if kind == "equinox":
        from ._models_eqx import EqxSplit

        return EqxSplit(model)
    if kind == "keras":
        from ._models_keras import KerasSplit

        return KerasSplit(model)
    raise CaptureError(
        "a Flax Linen module cannot be passed as an argument",
        code="NBC113",
        hint="pass its variables instead: loss(variables, x) calling model.apply(variables, x)",
    )


def _display_name(target: Any) -> str:
    inner = target.func if isinstance(target, functools.partial) else target
    return getattr(inner, "__name__", None) or type(inner).__name__


def _arg_names(call: Callable[..., Any], args: tuple, kwargs: dict) -> list[str]:
    try:
        bound = inspect.signature(call).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return [f"arg{i}" for i in range(len(args))]
    names: list[str] = []
    for name, value in bound.arguments.items():
        if isinstance(value, tuple) and name not in kwargs and len(names) < len(args):
            names += [f"{name}{i}" for i in range(len(value))]
        elif len(names) < len(args):
            names.append(name)
    return (names + [f"arg{i}" for i in range(len(names), len(args))])[: len(args)]


def _named(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    fn.__name__ = fn.__qualname__ = name.replace(" ", "_") or "model"
    return fn


def _model_adapted(
    kind: str,
    name: str,
    call: Callable[..., Any],
    params: Any,
    state: Any,
    args: tuple,
    kwargs: dict,
    update: Callable[..., Any] | None,
    signature_of: Callable[..., Any] | None,
) -> Adapted:
    """fn(params, state, *array args[, array kwargs]) around ``call(params, state, *a, **kw)``."""
    dynamic = [i for i, a in enumerate(args) if _holds_arrays(a)]
    dyn_kwargs = {k: v for k, v in kwargs.items() if _holds_arrays(v)}

    def fn(params: Any, state: Any, *values: Any) -> Any:
        call_args = list(args)
        for i, value in zip(dynamic, values, strict=False):
            call_args[i] = value
        call_kwargs = dict(kwargs)
        if dyn_kwargs:
            call_kwargs.update(values[len(dynamic)])
        return call(params, state, *call_args, **call_kwargs)

    names = _arg_names(signature_of, args, kwargs) if signature_of else []
    names += [f"arg{i}" for i in range(len(names), len(args))]
    arg_names = ("params", "state", *(names[i] for i in dynamic))
    extra = (dyn_kwargs,) if dyn_kwargs else ()
    return Adapted(
        fn=_named(fn, name),
        args=(params, state, *(args[i] for i in dynamic), *extra),
        params_argnums=(0,),
        state_argnums=(1,),
        kind=kind,
        name=name,
        arg_names=arg_names + (("kwargs",) if dyn_kwargs else ()),
        _update=update,
    )


def _adapt_model(kind: str, target: Any, args: tuple, kwargs: dict) -> Adapted:
    if inspect.ismethod(target):
        model, method = target.__self__, target.__name__
    else:
        model, method = target, "__call__"
    if kind == "flax-linen":
        from ._models_flax import linen_call

        _module, call, params, state, name = linen_call(target, args, kwargs)
        if method == "apply":
            args = tuple(args[1:])

        def update(new_params: Any) -> Any:
            return {"params": new_params, **state}

        return _model_adapted(kind, name, call, params, state, args, kwargs, update, None)
    split = _splitter(kind, model)
    if kind == "keras":

        def keras_call(p: Any, s: Any, *a: Any, **kw: Any) -> Any:
            return split.call(p, s, method, *a, **kw)

        call = keras_call
    else:

        def call(p: Any, s: Any, *a: Any, **kw: Any) -> Any:
            with split.bound(p, s) as module:
                return getattr(module, method)(*a, **kw)

    sig = getattr(model, "call", None) if kind == "keras" else getattr(model, method, None)
    return _model_adapted(
        kind, split.name, call, split.params, split.state, args, kwargs, split.update, sig
    )


def _adapt_function(target: Any, args: tuple, kwargs: dict) -> Adapted:
    name = _display_name(target)
    models = [(i, kind) for i, a in enumerate(args) if (kind := model_kind(a))]
    if any(model_kind(v) for v in kwargs.values()):
        raise CaptureError(
            f"a model is passed to {name}() as a keyword argument",
            code="NBC113",
            hint="pass the model positionally, e.g. loss(model, x, y)",
        )
    if not models:
        return Adapted(
            fn=target,
            args=tuple(args),
            params_argnums=(),
            kind="function",
            name=name,
            kwargs=dict(kwargs),
            arg_names=tuple(_arg_names(target, tuple(args), kwargs)),
            _rebind=lambda compiled: compiled,
        )
    splits = {i: _splitter(kind, args[i]) for i, kind in models}
    n_args = len(args)

    def fn(*values: Any, **kw: Any) -> Any:
        call_args = list(values[:n_args])
        with contextlib.ExitStack() as stack:
            for j, (i, split) in enumerate(splits.items()):
                call_args[i] = stack.enter_context(split.bound(values[i], values[n_args + j]))
            return target(*call_args, **kw)

    def layout(call_args: tuple) -> tuple:
        fresh = {i: _splitter(splits[i].kind, call_args[i]) for i in splits}
        values = [fresh[i].params if i in fresh else a for i, a in enumerate(call_args)]
        return (*values, *(fresh[i].state for i in fresh))

    def rebind(compiled: Any) -> Any:
        @functools.wraps(target)
        def with_models(*call_args: Any, **kw: Any) -> Any:
            return compiled(*layout(call_args), **kw)

        return with_models

    def update(*new_params: Any) -> Any:
        updated = [split.update(p) for split, p in zip(splits.values(), new_params, strict=True)]
        return updated[0] if len(updated) == 1 else tuple(updated)

    names = _arg_names(target, tuple(args), kwargs)
    state_names = [f"{names[i]}_state" for i in splits]
    return Adapted(
        fn=_named(fn, name),
        args=layout(tuple(args)),
        params_argnums=tuple(splits),
        state_argnums=tuple(range(n_args, n_args + len(splits))),
        kind="function",
        name=name,
        kwargs=dict(kwargs),
        arg_names=(*names, *state_names),
        _rebind=rebind,
        _update=update,
    )


def adapt(target: Any, args: tuple = (), kwargs: dict | None = None) -> Adapted:
    """The :class:`Adapted` form of ``target(*args, **kwargs)`` (see the module docstring)."""
    kwargs = dict(kwargs or {})
    owner = target.__self__ if inspect.ismethod(target) else target
    kind = model_kind(owner)
    if kind is not None:
        return _adapt_model(kind, target, tuple(args), kwargs)
    return _adapt_function(target, tuple(args), kwargs)
