"""``nbcompile.compile`` and the ``Compilation`` it returns.

Two objects, so that a cache hit can never be stale:

- a :class:`Program` is what one trace → lower → compile produced (the JAX stage objects, the
  target, the lazily computed analysis, the ``value_and_grad`` program with ``--grad``). It
  depends only on what the cache key covers, so the cell cache stores and reuses Programs;
- a :class:`Compilation` is one *run*: a Program plus the live call (the callable, its example
  arguments and model weights as they are now) and what this run measured (bench, ablation,
  debug, freeze, profile, memory). Every ``%%compile`` run gets a fresh Compilation, so values
  are always read live and notes of earlier options never linger.

``Compilation`` is a closed type: every field is declared in ``__slots__`` (its mixins,
``_runs.Runs`` and ``_display.Display``, declare none) and changed only by its own methods.
"""

from __future__ import annotations

from ..pipeline import Program
from ._api import _as_argnums, compare, compile
from ._core import Compilation

__all__ = ["Compilation", "Program", "_as_argnums", "compare", "compile"]
