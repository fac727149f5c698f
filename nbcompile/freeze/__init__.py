"""Frozen single-file models (`.nbc`): write with `freeze`, read with `load`, check with `verify`.

The file format is described in ``docs/format.md``.
"""

from __future__ import annotations

from nbcompile.freeze._load import FrozenModel, load
from nbcompile.freeze._verify import verify
from nbcompile.freeze._write import FreezeResult, freeze

__all__ = ["FreezeResult", "FrozenModel", "freeze", "load", "verify"]
