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
import dataclasses
import functools
import importlib
import inspect
import keyword
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

from ..errors import CaptureError
from ._models_scopes import module_paths, scope_path
from .names import call_arg_names

__all__ = [
    "Adapted",
    "MissingLibraryError",
    "adapt",
    "model_kind",
    "module_paths",
    "scope_path",
    "training_layers",
]


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
    if kind == "flax-nnx" and not isinstance(obj, base):
        # other NNX graph nodes (``nnx.Rngs``, ``nnx.Optimizer``) split the same way
        return kind if library.graph.is_graph_node(obj) else None
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

    Call it as ``fn(*args, **kwargs)``; ``kwargs`` holds the call's keyword arguments (plain
    functions) or is empty. ``params_argnums`` are the parameter arguments (for gradients),
    ``state_argnums`` the other model state (BatchNorm statistics, RNG state): weights to freeze
    are ``params_argnums + state_argnums``. ``arg_names`` are the user's names of ``args``.
    ``models`` are the library objects whose arrays became inputs (the target itself for a model
    target); ``structure`` is everything about them that is *not* an array value (module graph,
    flags such as ``deterministic``/``inference``, static fields), for the cell cache key.
    ``rebindable``: ``fn`` is the callable the cell named, so its ``jax.jit`` may replace it.
    """

    fn: Callable[..., Any]
    args: tuple
    params_argnums: tuple[int, ...]
    kind: str
    name: str
    state_argnums: tuple[int, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    arg_names: tuple[str, ...] = ()
    models: tuple[Any, ...] = ()
    structure: tuple[Any, ...] = ()
    rebindable: bool = False

    @property
    def weights_argnums(self) -> tuple[int, ...]:
        """Arguments holding trained values (parameters and state): what a frozen model stores."""
        return tuple(sorted(self.params_argnums + self.state_argnums))


def training_layers(models: tuple[Any, ...]) -> list[str]:
    """Layers of ``models`` still in training mode (Flax NNX ``Dropout``/``BatchNorm``), as
    ``"path (Class)"``: what a model traced now computes as in training."""
    found: list[str] = []
    for model in models:
        if model_kind(model) == "flax-nnx":
            from ._models_flax import training_layers as nnx_training_layers

            found += nnx_training_layers(model)
    return found


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


def _named(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    fn.__name__ = fn.__qualname__ = name.replace(" ", "_") or "model"
    return fn


def _signed(
    fn: Callable[..., Any], names: Any, keywords: Any = (), wraps: Any = None
) -> Callable[..., Any]:
    """Give a ``*values`` wrapper the user's parameter names, positional ``names`` then the
    call's ``keywords``. JAX names arguments from the signature in its messages and in the
    program (``argument n``, ``path static.activation``), and ``jax.jit`` resolves
    ``static_argnames`` with it: without this they read ``values[2]``. Names that are not
    plain identifiers (``args[0]``: the user's own signature is unknown) keep the wrapper's.
    With a signature set, ``wraps`` (the user's callable) becomes ``__wrapped__``, so JAX's
    messages place the function in the user's code, not in this file (``inspect.signature``
    stops at ``__signature__`` and never reads the user's own through it)."""
    names = list(names)
    if len(set(names)) != len(names) or not all(
        n.isidentifier() and not keyword.iskeyword(n) for n in names
    ):
        return fn
    kind = inspect.Parameter
    params = [kind(n, kind.POSITIONAL_OR_KEYWORD) for n in names]
    extra = [k for k in keywords if k not in names]
    if all(k.isidentifier() and not keyword.iskeyword(k) for k in extra):
        params += [kind(k, kind.KEYWORD_ONLY) for k in extra]
    elif "kwargs" not in names:
        params.append(kind("kwargs", kind.VAR_KEYWORD))
    else:
        return fn
    fn.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    if wraps is not None:
        fn.__wrapped__ = wraps  # type: ignore[attr-defined]
    return fn


def _model_adapted(
    kind: str,
    name: str,
    call: Callable[..., Any],
    split: Any,
    args: tuple,
    kwargs: dict,
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

    names = call_arg_names(signature_of, args, kwargs) if signature_of else []
    names += [f"args[{i}]" for i in range(len(names), len(args))]
    arg_names = ("params", "state", *(names[i] for i in dynamic))
    extra = (dyn_kwargs,) if dyn_kwargs else ()
    arg_names += ("kwargs",) if dyn_kwargs else ()
    return Adapted(
        fn=_signed(_named(fn, name), arg_names, wraps=signature_of),
        args=(split.params, split.state, *(args[i] for i in dynamic), *extra),
        params_argnums=(0,),
        state_argnums=(1,),
        kind=kind,
        name=name,
        arg_names=arg_names,
        models=(split.model,),
        structure=(
            split.structure(),
            tuple(a for i, a in enumerate(args) if i not in dynamic),
            tuple(sorted((k, v) for k, v in kwargs.items() if k not in dyn_kwargs)),
        ),
    )


def _adapt_model(kind: str, target: Any, args: tuple, kwargs: dict) -> Adapted:
    if inspect.ismethod(target):
        model, method = target.__self__, target.__name__
    else:
        model, method = target, "__call__"
    if kind == "flax-linen":
        from ._models_flax import LinenSplit

        split = LinenSplit(target, args)
        if method == "apply":
            args = tuple(args[1:])
        return _model_adapted(kind, split.name, split.call, split, args, kwargs, None)
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
    return _model_adapted(kind, split.name, call, split, args, kwargs, sig)


def _adapt_function(target: Any, args: tuple, kwargs: dict, *, rebindable: bool) -> Adapted:
    name = _display_name(target)
    models = [(i, kind) for i, a in enumerate(args) if (kind := model_kind(a))]
    if any(model_kind(v) for v in kwargs.values()):
        raise CaptureError(
            f"a model is passed to {name}() as a keyword argument",
            code="NBC113",
            hint="pass the model positionally, e.g. loss(model, x, y)",
        )
    names = call_arg_names(target, tuple(args), kwargs)
    if not models:
        return Adapted(
            fn=target,
            args=tuple(args),
            params_argnums=(),
            kind="function",
            name=name,
            kwargs=dict(kwargs),
            arg_names=tuple(names),
            rebindable=rebindable,
        )
    splits = {i: _splitter(kind, args[i]) for i, kind in models}
    n_args = len(args)

    def fn(*values: Any, **kw: Any) -> Any:
        call_args = list(values[:n_args])
        with contextlib.ExitStack() as stack:
            for j, (i, split) in enumerate(splits.items()):
                call_args[i] = stack.enter_context(split.bound(values[i], values[n_args + j]))
            return target(*call_args, **kw)

    values = [splits[i].params if i in splits else a for i, a in enumerate(args)]
    arg_names = (*names, *(f"{names[i]}_state" for i in splits))
    return Adapted(
        fn=_signed(_named(fn, name), arg_names, kwargs, wraps=target),
        args=(*values, *(split.state for split in splits.values())),
        params_argnums=tuple(splits),
        state_argnums=tuple(range(n_args, n_args + len(splits))),
        kind="function",
        name=name,
        kwargs=dict(kwargs),
        arg_names=arg_names,
        models=tuple(split.model for split in splits.values()),
        structure=tuple((i, split.structure()) for i, split in splits.items()),
    )


def _closure_models(fn: Any, depth: int = 4) -> bool:
    """Whether a model object sits in ``fn``'s closure (or a partial's arguments), e.g.
    ``jax.vmap(model)``: its weights would otherwise be baked into the program as constants."""
    if depth < 0:
        return False
    if isinstance(fn, functools.partial):
        parts = [fn.func, *fn.args, *fn.keywords.values()]
    else:
        cells = getattr(fn, "__closure__", None) or ()
        parts = []
        for cell in cells:
            with contextlib.suppress(ValueError):  # an empty cell
                parts.append(cell.cell_contents)
    return any(
        model_kind(p) is not None or (callable(p) and _closure_models(p, depth - 1)) for p in parts
    )


def _lift_closure_models(target: Any) -> tuple[Callable[..., Any], list[Any]]:
    """``target`` as a function of the models its closure holds: ``(call, models)`` with
    ``call(*models)(*args)`` equal to ``target(*args)`` — so the models can be split into
    inputs like any model argument. Closure cells are swapped in a copy, never in place."""
    models: list[Any] = []

    def lift(fn: Any, depth: int) -> Callable[[list[Any]], Any]:
        if depth < 0:
            return lambda _values: fn
        if model_kind(fn) is not None:
            index = len(models)
            models.append(fn)
            return lambda values: values[index]
        if isinstance(fn, functools.partial):
            parts = [lift(p, depth - 1) for p in (fn.func, *fn.args)]
            kw = {k: lift(v, depth - 1) for k, v in fn.keywords.items()}
            return lambda values: functools.partial(
                parts[0](values),
                *(p(values) for p in parts[1:]),
                **{k: v(values) for k, v in kw.items()},
            )
        cells = getattr(fn, "__closure__", None)
        if not cells or not _closure_models(fn, depth):
            return lambda _values: fn
        contents = []
        for cell in cells:
            try:
                contents.append(lift(cell.cell_contents, depth - 1))
            except ValueError:  # an empty cell stays empty
                contents.append(None)

        def rebuild(values: list[Any]) -> Any:
            closure = tuple(
                types.CellType() if c is None else types.CellType(c(values)) for c in contents
            )
            new = types.FunctionType(
                fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, closure
            )
            new.__kwdefaults__ = fn.__kwdefaults__
            new.__dict__.update(fn.__dict__)
            return new

        return rebuild

    build = lift(target, 4)
    return (lambda *ms: build(list(ms))), models


def _adapt_closure(target: Any, args: tuple, kwargs: dict) -> Adapted:
    """A callable holding models in its closure (``jax.vmap(model)``): models become inputs."""
    build, models = _lift_closure_models(target)
    name = _display_name(target)
    if not name.isidentifier():  # jax.vmap(model) is "<unnamed_function>": name its models
        name = "_".join(type(m).__name__ for m in models)
    n_models = len(models)

    def with_models(*values: Any, **kw: Any) -> Any:
        return build(*values[:n_models])(*values[n_models:], **kw)

    names = ["model" if n_models == 1 else f"model{i}" for i in range(n_models)]
    # the call's own names (``x`` of ``jax.vmap(model)(x)``: vmap keeps the model's signature)
    user = [n if n not in names else f"{n}_arg" for n in call_arg_names(target, args, kwargs)]
    _signed(_named(with_models, name), [*names, *user], kwargs, wraps=target)
    inner = _adapt_function(with_models, (*models, *args), kwargs, rebindable=False)
    arg_names = list(inner.arg_names)
    arg_names[:n_models] = names
    n_all = n_models + len(args)
    arg_names[n_models:n_all] = user
    arg_names[n_all:] = [f"{n}_state" for n in names]
    return dataclasses.replace(inner, arg_names=tuple(arg_names))


def adapt(target: Any, args: tuple = (), kwargs: dict | None = None) -> Adapted:
    """The :class:`Adapted` form of ``target(*args, **kwargs)`` (see the module docstring)."""
    kwargs = dict(kwargs or {})
    owner = target.__self__ if inspect.ismethod(target) else target
    kind = model_kind(owner)
    if kind is not None:
        return _adapt_model(kind, target, tuple(args), kwargs)
    if not hasattr(target, "lower") and _closure_models(target):
        return _adapt_closure(target, tuple(args), kwargs)
    return _adapt_function(target, tuple(args), kwargs, rebindable=True)
