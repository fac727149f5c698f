"""nbcompile: ``%%compile`` a notebook model with JAX/XLA and see what the compiler did.

Public API::

    c = nbcompile.compile(fn, *example_args, backend=None, grad=None, **jit_kwargs)
    nbcompile.freeze(fn, *example_args, path="model.nbc")
    model = nbcompile.load("model.nbc")

In IPython/Jupyter: ``%load_ext nbcompile`` then ``%%compile`` on a cell. Importing this package
imports neither IPython nor the widgets; heavy modules load on first use. Where an accelerator
plugin is installed without its device (the ``[tpu]`` extra on a machine with no TPU), importing
it tells JAX to start on the CPU, as ``%load_ext`` does, so that a script or a fresh process
using the Python API does not print libtpu's start-up errors (see ``_quiet_jax_start``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "Compilation",
    "Graph",
    "NbcompileError",
    "__version__",
    "cluster",
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
    "cluster": ("nbcompile.processes", "cluster"),
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
    from .processes import cluster
    from .session import last, last_error


def _quiet_jax_start() -> None:
    """Tell JAX to start on the CPU where an accelerator plugin is installed without its
    device (nbcompile._compat.quiet_platforms; starts no backend). JAX is imported only where
    such a plugin is installed and JAX_PLATFORMS is not set."""
    import os
    import sys

    if os.environ.get("JAX_PLATFORMS") or sys.platform != "linux":
        return
    import importlib.util

    plugins = ("libtpu", "jax_cuda12_plugin", "jax_cuda13_plugin")
    try:
        if not any(importlib.util.find_spec(m) is not None for m in plugins):
            return
        from ._compat import quiet_platforms

        quiet_platforms()
    except Exception:  # never fail an import over keeping the console quiet
        return


_quiet_jax_start()


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
