"""nbcompile: ``%%compile`` a notebook model with JAX/XLA and see what the compiler did.

Public API::

    c = nbcompile.compile(fn, *example_args, backend=None, grad=None, **jit_kwargs)
    nbcompile.freeze(fn, *example_args, path="model.nbc")
    model = nbcompile.load("model.nbc")

In IPython/Jupyter: ``%load_ext nbcompile`` then ``%%compile`` on a cell. Importing this package
imports neither IPython nor the widgets; heavy modules load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "Compilation",
    "Graph",
    "NbcompileError",
    "__version__",
    "compare",
    "compile",
    "freeze",
    "last",
    "last_error",
    "load",
    "load_ipython_extension",
    "unload_ipython_extension",
    "verify",
]

_LAZY = {
    "compile": ("nbcompile.compilation", "compile"),
    "compare": ("nbcompile.compilation", "compare"),
    "Compilation": ("nbcompile.compilation", "Compilation"),
    "Graph": ("nbcompile.analysis", "Graph"),
    "NbcompileError": ("nbcompile.errors", "NbcompileError"),
    "last_error": ("nbcompile.session", "last_error"),
    "last": ("nbcompile.session", "last"),
    "freeze": ("nbcompile.frozen", "freeze"),
    "load": ("nbcompile.frozen", "load"),
    "verify": ("nbcompile.frozen", "verify"),
}

if TYPE_CHECKING:
    from .analysis import Graph
    from .compilation import Compilation, compare, compile
    from .errors import NbcompileError
    from .frozen import freeze, load, verify
    from .session import last, last_error


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'nbcompile' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext nbcompile``: register ``%%compile``."""
    from .magic import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from .magic import unload_ipython_extension as unload

    unload(ipython)
