"""Frozen single-file models (`.nbc`): write with `freeze`, read with `load`, check with `verify`.

The file format is described in ``docs/format.md``.
"""

from __future__ import annotations

from nbcompile.frozen._load import load
from nbcompile.frozen._model import FrozenModel
from nbcompile.frozen._verify import verify
from nbcompile.frozen._write import FreezeResult, freeze

__all__ = ["FreezeResult", "FrozenModel", "freeze", "load", "verify"]
