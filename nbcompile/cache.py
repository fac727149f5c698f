"""Cache keys for ``%%compile`` cells, the in-process cache, and JAX's persistent cache.

A key covers everything that can change the compiled program: the cell source, the options,
the example arguments' structure/shapes/dtypes (values for non-array leaves), the versions of
nbcompile/jax/jaxlib, the backend, and a fingerprint of the globals the target reads (arrays by
content up to 64 MiB, larger ones by identity) since closed-over arrays become constants.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import types
from collections import OrderedDict
from pathlib import Path
from typing import Any

import jax
import numpy as np

_CONTENT_LIMIT = 64 * 2**20


def _leaf_key(x: Any) -> str:
    shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
    if shape is not None and dtype is not None:
        weak = getattr(x, "weak_type", False)
        return f"{dtype}{list(shape)}{'w' if weak else ''}"
    return f"{type(x).__qualname__}:{x!r}"[:200]


def signature_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
    return f"{treedef}|" + ";".join(_leaf_key(leaf) for leaf in leaves)


def _array_fingerprint(x: Any) -> str:
    nbytes = int(getattr(x, "nbytes", 0) or 0)
    if nbytes <= _CONTENT_LIMIT:
        try:
            data = np.asarray(x)
            return f"{data.dtype}{data.shape}:" + hashlib.blake2b(
                np.ascontiguousarray(data).tobytes(), digest_size=16
            ).hexdigest()
        except Exception:  # not materialisable (e.g. a tracer): identity is the honest key
            pass
    return f"{getattr(x, 'dtype', '?')}{getattr(x, 'shape', '?')}@{id(x)}"


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def globals_fingerprint(fn: Any, depth: int = 3) -> str:
    """Fingerprint of the globals ``fn`` (and functions it calls, ``depth`` deep) reads."""
    parts: list[str] = []
    seen: set[int] = set()

    def visit(obj: Any, level: int) -> None:
        obj = getattr(obj, "__wrapped__", obj)
        code = getattr(obj, "__code__", None)
        glb = getattr(obj, "__globals__", None)
        if not isinstance(code, types.CodeType) or glb is None or id(code) in seen:
            return
        seen.add(id(code))
        for cell in getattr(obj, "__closure__", None) or ():
            with contextlib.suppress(ValueError):  # an empty closure cell
                parts.append("closure:" + _value_key(cell.cell_contents, level, visit))
        for name in sorted(_code_names(code)):
            if name in glb:
                parts.append(f"{name}=" + _value_key(glb[name], level, visit))

    visit(fn, depth)
    return hashlib.blake2b("\n".join(parts).encode(), digest_size=16).hexdigest()


def _value_key(value: Any, level: int, visit: Any) -> str:
    if isinstance(value, types.ModuleType):
        return f"module:{value.__name__}"
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return _array_fingerprint(value)
    if isinstance(value, int | float | complex | str | bool | bytes | type(None)):
        return repr(value)
    if callable(value):
        if level > 0:
            visit(value, level - 1)
        code = getattr(getattr(value, "__wrapped__", value), "__code__", None)
        return f"fn:{getattr(value, '__qualname__', type(value).__name__)}:" + (
            hashlib.blake2b(code.co_code, digest_size=8).hexdigest() if code else ""
        )
    if isinstance(value, list | tuple | dict):
        leaves = jax.tree_util.tree_leaves(value)
        if len(leaves) <= 1024:
            return ";".join(_value_key(v, 0, visit) for v in leaves)
    return f"{type(value).__qualname__}@{id(value)}"


def cell_key(
    *, source: str, options: str, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
    backend: str,
) -> str:
    from . import __version__

    text = "\n".join([
        source, options, signature_key(args, kwargs), backend,
        f"nbcompile={__version__} jax={jax.__version__} jaxlib={jax.lib.__version__}",
        globals_fingerprint(target),
    ])
    return hashlib.sha256(text.encode()).hexdigest()


class CompilationCache:
    """A small LRU of Compilations keyed by :func:`cell_key`."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._items: OrderedDict[str, Any] = OrderedDict()

    def get(self, key: str) -> Any | None:
        item = self._items.get(key)
        if item is not None:
            self._items.move_to_end(key)
        return item

    def put(self, key: str, value: Any) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def clear(self) -> None:
        self._items.clear()


def enable_persistent_cache(directory: str | os.PathLike[str] | None = None) -> Path | None:
    """Point JAX's persistent compilation cache at a per-user folder (unless already set)."""
    if jax.config.jax_compilation_cache_dir:
        return Path(jax.config.jax_compilation_cache_dir)
    base = directory or os.environ.get("NBCOMPILE_CACHE_DIR") or (
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "nbcompile" / "jax"
    )
    path = Path(base)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
    return path
