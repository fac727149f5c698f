"""A symbolic batch dimension ``b`` for frozen models (jax.export shape polymorphism).

With ``freeze(..., batch="auto")`` every non-weight input leaf whose leading dimension equals
the first input leaf's is exported with the symbolic dimension ``b``, so the loaded model
serves any positive batch size. The manifest writes that dimension as the string ``"b"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from nbcompile.frozen._manifest import BATCH_DIM

__all__ = ["BATCH_DIM", "batched", "concrete_shape", "dims", "input_specs", "show", "symbol"]

#: Batch sizes a symbolic program is specialised to before it is accepted (besides the example's).
PROBE_SIZES = (1, 3)


def batched(leaves: Sequence[np.ndarray]) -> list[bool]:
    """Which input leaves carry the batch dimension (all False when there is none)."""
    if not leaves or leaves[0].ndim == 0 or leaves[0].shape[0] == 0:
        return [False] * len(leaves)
    size = leaves[0].shape[0]
    return [a.ndim >= 1 and a.shape[0] == size for a in leaves]


def input_specs(
    leaves: Sequence[np.ndarray], marks: Sequence[bool], size: Any
) -> list[jax.ShapeDtypeStruct]:
    """Specs of the input leaves with the leading dimension of the marked ones set to ``size``."""
    return [
        jax.ShapeDtypeStruct((size, *a.shape[1:]) if mark else a.shape, a.dtype)
        for a, mark in zip(leaves, marks, strict=True)
    ]


def symbol() -> Any:
    """A fresh symbolic dimension ``b`` (one scope per freeze)."""
    (b,) = jax.export.symbolic_shape(BATCH_DIM)
    return b


def dims(shape: Sequence[Any]) -> list[int | str] | None:
    """Manifest dimensions of a (possibly symbolic) shape: ints, or ``"b"`` for the batch.

    None for any other symbolic expression (``2*b``, ``b + 1``, another name), which the
    manifest cannot describe.
    """
    out: list[int | str] = []
    for d in shape:
        if jax.export.is_symbolic_dim(d):
            if str(d) != BATCH_DIM:
                return None
            out.append(BATCH_DIM)
        else:
            out.append(int(d))
    return out


def concrete_shape(shape: Sequence[int | str], size: int) -> tuple[int, ...]:
    """A manifest shape with ``"b"`` replaced by ``size``."""
    return tuple(size if d == BATCH_DIM else int(d) for d in shape)


def show(shape: Sequence[int | str]) -> str:
    """``[b, 32]`` style text of a manifest shape."""
    return "[" + ", ".join(str(d) for d in shape) + "]"
