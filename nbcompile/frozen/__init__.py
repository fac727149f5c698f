"""Frozen single-file models (`.nbc`): write with `freeze`, read with `load`, check with `verify`.

The file format, what the loader guarantees and its limits are described in ``docs/format.md``.
``describe`` (with ``leaf_names`` and ``shape_text``) is what ``nbcompile inspect`` shows.
"""

from __future__ import annotations

from nbcompile.frozen._describe import describe, leaf_names, shape_text
from nbcompile.frozen._load import load
from nbcompile.frozen._model import FrozenModel
from nbcompile.frozen._verify import verify
from nbcompile.frozen._write import FreezeResult, freeze

__all__ = [
    "FreezeResult",
    "FrozenModel",
    "describe",
    "freeze",
    "leaf_names",
    "load",
    "shape_text",
    "verify",
]
