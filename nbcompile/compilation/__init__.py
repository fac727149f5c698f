"""``nbcompile.compile`` and the ``Compilation`` it returns.

A :class:`Program` is what one trace → lower → compile produced (cached per cell); a
:class:`Compilation` is one run over it (the live call and what this run measured): see
``_core`` for why there are two. ``Compilation`` is a closed type: every field is declared in
``__slots__`` (its mixins, ``_runs.Runs`` and ``_display.Display``, declare none) and changed
only by its own methods.
"""

from __future__ import annotations

from ..pipeline import Program
from ._api import _as_argnums, compare, compile
from ._core import Compilation

__all__ = ["Compilation", "Program", "_as_argnums", "compare", "compile"]
