"""Cache keys for ``%%compile`` cells, the in-process cache, and JAX's persistent cache.

A cache hit may skip XLA; it must never give a different answer than compiling the live
objects would. So the key covers everything that changes the *traced program* and nothing that
is an input of it:

- the cell source, the options that change the program, nbcompile/jax/jaxlib versions, the
  backend;
- the example call's structure: pytree structure, each array's dtype/shape/weak type/sharding,
  every non-array leaf by value;
- a model's structure (:attr:`Adapted.structure`: NNX graph definition, Equinox static
  partition, Linen module fields, Keras layer configs and flags) compared by *equality* on a hit;
- everything the traced code reads that is not an input: the globals and closures of the
  target, of the functions it calls and of the model's own classes' methods — Python scalars,
  config objects and arrays (which become constants) by *content*; large immutable JAX arrays by
  identity, kept alive by the cache entry so an identity cannot be reused.
- where that code is: each function's file (a notebook cell by its content hash) and line
  table, since the program's source lines come from there (a docstring that moves a model's
  ``__call__`` down compiles again, so its fusions name the new lines).

Values that are inputs (weights, example arrays) are never part of the key: every run reads
them live, so a hit after ``model.eval()``, new weights or Keras ``predict`` compiles nothing
and still computes with the live objects.
"""

from __future__ import annotations

import functools
import hashlib
import os
import types
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import numpy as np

from . import _dirs
from .capture.source import cell_identity
from .capture.userfiles import is_user_file

__all__ = ["CacheKey", "CompilationCache", "enable_persistent_cache", "fingerprint", "make_key"]

_CONTENT_LIMIT = 64 * 2**20  # JAX arrays above this are keyed by identity (they are immutable)
_BUDGET = 200_000  # objects one fingerprint may visit before it falls back to identities
_DEPTH = 12


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _sharding_text(leaf: Any) -> str:
    sharding = getattr(leaf, "sharding", None)
    spec = getattr(sharding, "spec", None)
    if spec is None:
        return ""
    mesh = getattr(sharding, "mesh", None)
    return f"@{dict(getattr(mesh, 'shape', {}))}{spec}"


def _leaf_key(x: Any) -> str:
    shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
    if shape is not None and dtype is not None:
        weak = "w" if getattr(x, "weak_type", False) else ""
        return f"{dtype}{list(shape)}{weak}{_sharding_text(x)}"
    return f"{type(x).__qualname__}:{x!r}"[:400]


def signature_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """Structure, shapes, dtypes and shardings of a call's inputs; other leaves by value."""
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
    return f"{treedef}|" + ";".join(_leaf_key(leaf) for leaf in leaves)


class _Walker:
    """Fingerprint of what traced code reads besides its inputs (see the module docstring)."""

    def __init__(self, inputs: tuple[Any, ...] = ()) -> None:
        self.parts: list[str] = []
        self.pins: list[Any] = []
        self.seen: set[int] = set()
        self.budget = _BUDGET
        self.inputs = {id(m) for m in inputs}  # models whose arrays are program inputs

    def out(self, text: str) -> None:
        self.parts.append(text)

    def identity(self, obj: Any, why: str) -> None:
        self.pins.append(obj)  # a live object cannot share its id with a later one
        self.out(f"{why}:{type(obj).__qualname__}@{id(obj)}")

    def array(self, x: Any) -> None:
        nbytes = int(getattr(x, "nbytes", 0) or 0)
        if isinstance(x, jax.Array) and nbytes > _CONTENT_LIMIT:
            self.identity(x, "array")
            return
        if isinstance(x, jax.core.Tracer):
            self.identity(x, "tracer")
            return
        data = np.ascontiguousarray(np.asarray(x))
        self.out(f"array:{data.dtype}{data.shape}:{_digest(data.tobytes())}")

    def code(self, code: types.CodeType, glb: dict[str, Any] | None, depth: int) -> None:
        self.out(f"code:{code.co_qualname}:{_digest(code.co_code)}")
        # where it is: the program's source lines come from here (a cell by its content, so an
        # unchanged re-run still hits; a docstring above a method moves its lines and misses)
        self.out(f"at:{cell_identity(code.co_filename)}:{code.co_firstlineno}")
        self.out(_digest(code.co_linetable))
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                self.code(const, glb, depth)
            elif not isinstance(const, frozenset | tuple):
                self.out(repr(const)[:200])
        if glb is not None:
            for name in code.co_names:
                if name in glb:
                    self.out(f"global {name}=")
                    self.visit(glb[name], depth - 1)

    def function(self, fn: types.FunctionType, depth: int) -> None:
        self.code(fn.__code__, fn.__globals__, depth)
        for cell in fn.__closure__ or ():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty closure cell
                continue
            self.out("closure=")
            self.visit(value, depth - 1)
        for default in fn.__defaults__ or ():
            self.visit(default, depth - 1)

    def user_class(self, cls: type, depth: int) -> None:
        for klass in cls.__mro__:
            module = klass.__dict__.get("__module__", "")
            if klass is object or module in ("builtins", "abc"):
                continue
            for name, attr in sorted(klass.__dict__.items()):
                # only real functions are looked at: asking an arbitrary class attribute for
                # __func__ can run its code (lazy modules import on attribute access)
                inner = attr.__func__ if isinstance(attr, classmethod | staticmethod) else attr
                if isinstance(inner, types.FunctionType) and is_user_file(
                    inner.__code__.co_filename
                ):
                    self.out(f"method {klass.__qualname__}.{name}")
                    self.function(inner, depth - 1)

    def visit(self, obj: Any, depth: int = _DEPTH) -> None:
        self.budget -= 1
        if isinstance(obj, type(None) | bool | int | float | complex):
            self.out(repr(obj))
            return
        if isinstance(obj, str | bytes):
            self.out(repr(obj) if len(obj) <= 200 else _digest(str(obj).encode()))
            return
        if isinstance(obj, types.ModuleType):
            self.out(f"module:{obj.__name__}")
            return
        if isinstance(obj, jax.ShapeDtypeStruct):
            self.out(f"abstract:{_leaf_key(obj)}")
            return
        if isinstance(obj, np.ndarray | np.generic | jax.Array):
            self.array(obj)
            return
        if id(obj) in self.inputs:
            self.input_model(obj, depth)
            return
        if id(obj) in self.seen:
            self.out("seen")
            return
        if depth <= 0 or self.budget <= 0:
            self.identity(obj, "deep")
            return
        self.seen.add(id(obj))
        self.compound(obj, depth)

    def input_model(self, model: Any, depth: int) -> None:
        """A model whose arrays are inputs: only the code of its classes matters here (its
        structure is compared separately, its values are read live)."""
        self.out("input model")
        todo, seen, classes = [model], set(), {}
        while todo and len(seen) < _BUDGET // 10:
            obj = todo.pop()
            if id(obj) in seen or isinstance(obj, np.ndarray | jax.Array):
                continue
            seen.add(id(obj))
            classes.setdefault(type(obj), None)
            state = obj if isinstance(obj, dict) else _instance_dict(obj)
            if isinstance(state, dict):
                todo.extend(state.values())
            elif isinstance(obj, list | tuple):
                todo.extend(obj)
        for cls in sorted(classes, key=lambda c: f"{c.__module__}.{c.__qualname__}"):
            self.user_class(cls, depth)

    def compound(self, obj: Any, depth: int) -> None:
        if isinstance(obj, types.FunctionType):
            self.function(obj, depth)
        elif isinstance(obj, types.MethodType):
            self.visit(obj.__self__, depth - 1)
            self.visit(obj.__func__, depth - 1)
        elif isinstance(obj, type):
            self.out(f"class:{obj.__module__}.{obj.__qualname__}")
            self.user_class(obj, depth)
        elif isinstance(obj, list | tuple | set | frozenset):
            self.out(f"{type(obj).__name__}[{len(obj)}]")
            items = sorted(obj, key=repr) if isinstance(obj, set | frozenset) else obj
            for item in items:
                self.visit(item, depth - 1)
        elif isinstance(obj, dict):
            self.out(f"dict[{len(obj)}]")
            for k, v in obj.items():
                self.out(repr(k)[:200])
                self.visit(v, depth - 1)
        elif isinstance(obj, functools.partial):
            self.out("partial")
            for part in (obj.func, obj.args, obj.keywords):
                self.visit(part, depth - 1)
        elif _wrapped(obj) is not None:  # jax.jit objects, functools.wraps chains
            self.out(f"wraps:{type(obj).__qualname__}")
            self.visit(_wrapped(obj), depth - 1)
        else:
            self.instance(obj, depth)

    def instance(self, obj: Any, depth: int) -> None:
        cls = type(obj)
        self.out(f"object:{cls.__module__}.{cls.__qualname__}")
        self.user_class(cls, depth)
        state = _instance_dict(obj)
        if isinstance(state, dict):
            for k in sorted(state, key=str):
                self.out(f".{k}=")
                self.visit(state[k], depth - 1)
        elif "__slots__" in cls.__dict__:
            slots = cls.__dict__["__slots__"]
            for name in (slots,) if isinstance(slots, str) else slots:
                try:
                    value = object.__getattribute__(obj, name)
                except AttributeError:  # an unset slot
                    continue
                self.out(f".{name}=")
                self.visit(value, depth - 1)
        else:
            self.identity(obj, "opaque")


def _instance_dict(obj: Any) -> dict[str, Any] | None:
    """``obj.__dict__`` read without running any of ``obj``'s code (no ``__getattr__``: lazy
    modules and proxies import or compute on attribute access); None when it has none."""
    try:
        state = object.__getattribute__(obj, "__dict__")
    except (AttributeError, TypeError):
        return None
    return state if isinstance(state, dict) else None


def _wrapped(obj: Any) -> Any | None:
    """``obj.__wrapped__`` when ``obj`` stores one (jit objects, ``functools.wraps``)."""
    state = _instance_dict(obj)
    return state.get("__wrapped__") if state is not None else None


def fingerprint(*objects: Any, inputs: tuple[Any, ...] = ()) -> tuple[str, list[Any]]:
    """(digest, objects to keep alive) of what ``objects`` read besides their inputs;
    ``inputs`` are model objects whose arrays are program inputs (their values not read)."""
    walker = _Walker(inputs)
    for obj in objects:
        walker.visit(obj)
    return _digest("\n".join(walker.parts).encode()), walker.pins


@dataclass
class CacheKey:
    """A cell's cache key: ``digest`` for lookup, ``structure`` compared by equality on a hit,
    ``pins`` kept alive with the entry (objects keyed by identity)."""

    digest: str
    structure: tuple[Any, ...] = ()
    pins: list[Any] = field(default_factory=list, repr=False)


def make_key(*, source: str, options: str, target: Any, adapted: Any, backend: str) -> CacheKey:
    """The key of compiling ``adapted`` (an :class:`~nbcompile.capture.models.Adapted`)."""
    from . import __version__

    reads, pins = fingerprint(target, inputs=tuple(adapted.models))
    text = "\n".join(
        [
            source,
            options,
            signature_key(adapted.args, adapted.kwargs),
            backend,
            f"nbcompile={__version__} jax={jax.__version__} jaxlib={jax.lib.__version__}",
            repr(adapted.arg_names),
            reads,
        ]
    )
    digest = hashlib.sha256(text.encode()).hexdigest()
    return CacheKey(digest=digest, structure=tuple(adapted.structure), pins=pins)


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    try:
        return bool(a == b)
    except (TypeError, ValueError):  # a leaf that cannot be compared: treat as changed
        return False


class CompilationCache:
    """A small LRU of compiled programs keyed by :func:`make_key`."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._items: OrderedDict[str, tuple[CacheKey, Any]] = OrderedDict()

    def get(self, key: CacheKey) -> Any | None:
        item = self._items.get(key.digest)
        if item is None or not _same(item[0].structure, key.structure):
            return None
        self._items.move_to_end(key.digest)
        return item[1]

    def put(self, key: CacheKey, value: Any) -> None:
        self._items[key.digest] = (key, value)
        self._items.move_to_end(key.digest)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        self._items.clear()


def enable_persistent_cache(directory: str | os.PathLike[str] | None = None) -> Path | None:
    """Point JAX's persistent compilation cache at a per-user folder (unless already set).

    ``directory``, else ``$NBCOMPILE_CACHE_DIR``, else ``$XDG_CACHE_HOME/nbcompile/jax`` (an
    absolute ``XDG_CACHE_HOME`` only), else ``~/.cache/nbcompile/jax``. The cache holds native
    code that later processes run, so it is used only if it is a folder only this user can
    write (``nbcompile._dirs``); otherwise nothing is switched on (None, with a note).
    """
    if jax.config.jax_compilation_cache_dir:
        return Path(jax.config.jax_compilation_cache_dir)
    what = "JAX's persistent compilation cache"
    if directory:
        base: Path | None = Path(directory)
    else:
        base = _dirs.configured("NBCOMPILE_CACHE_DIR", "nbcompile", "jax")
    path = _dirs.private_folder(base, what)
    if path is None:
        return None
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
    return path
