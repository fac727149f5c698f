"""What an uncompiled call dispatches, counted two ways, and the flop split ``--bench`` reports.

* :func:`eager_dispatches` — an **ordinary eager call** ``f(x)`` (no ``jit``): every primitive
  of the traced program is dispatched as its own small compiled executable, and so is every
  *container* JAX runs whole: a nested ``jax.jit`` (library functions that are themselves jitted
  count once), a ``scan``, ``while`` or ``cond`` (JAX 0.10: ``jit_p``'s impl and
  ``dispatch.apply_primitive``). Wrappers whose impl evaluates their body primitive by primitive
  (``custom_jvp_call``, ``custom_vjp_call``, ``closed_call``, ``checkpoint``) are opened. A
  ``shard_map`` runs its body per device under its own trace: only a lower bound is known.
* :class:`OpByOp` — the hook for :class:`nbcompile.debug.Interpreter`, which replays the program
  the way ``jax.disable_jit()`` runs it (nested jits unrolled, loop bodies once per iteration):
  it counts those dispatches and splits the arithmetic into dot/conv flops and the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..debug.ids import open_jaxpr, subjaxprs

__all__ = ["OpByOp", "eager_dispatches"]

# Containers an ordinary eager call hands to XLA whole: one dispatch each (JAX 0.10.2).
_RUN_WHOLE = frozenset({"jit", "pjit", "scan", "while", "cond"})
# Containers whose eager impl evaluates the body equation by equation.
_OPENED = frozenset(
    {"closed_call", "core_call", "remat2", "checkpoint", "custom_jvp_call", "custom_vjp_call"}
)
_DATA_MOVEMENT = frozenset(
    {
        "broadcast_in_dim",
        "reshape",
        "transpose",
        "squeeze",
        "expand_dims",
        "convert_element_type",
        "iota",
        "copy",
        "copy_p",
        "slice",
        "dynamic_slice",
        "dynamic_update_slice",
        "concatenate",
        "gather",
        "pad",
        "rev",
    }
)


def eager_dispatches(jaxpr: Any) -> tuple[int, bool]:
    """``(count, exact)``: executables an ordinary eager call of the traced program dispatches
    (see the module docstring); ``exact`` is False where only a lower bound is known."""
    inner, _ = open_jaxpr(jaxpr)
    total, exact = 0, True
    for eqn in inner.eqns:
        name = eqn.primitive.name
        subs = subjaxprs(eqn)
        if not subs or name in _RUN_WHOLE:
            total += 1
        elif name in _OPENED and len(subs) == 1:
            n, e = eager_dispatches(subs[0][1])
            total, exact = total + n, exact and e
        else:  # shard_map and unknown containers: at least one dispatch, the rest unknown
            total, exact = total + 1, False
    return total, exact


@dataclass
class OpByOp:
    """Interpreter hook: the primitives an op-by-op replay dispatched and an analytic flop split
    (``2·M·N·K`` per dot, one flop per output element for other arithmetic)."""

    kernels: int = 0
    dot_ops: int = 0
    dot_flops: float = 0.0
    other_flops: float = 0.0

    def __call__(
        self, nid: str, eqn: Any, invals: list, outvals: list, it: tuple, leaf: bool
    ) -> None:
        if not leaf:
            return
        self.kernels += 1
        name = eqn.primitive.name
        out_size = sum(int(np.prod(np.shape(o))) for o in outvals)
        if name == "dot_general":
            (lhs_contract, _), _ = eqn.params["dimension_numbers"]
            k = int(np.prod([np.shape(invals[0])[d] for d in lhs_contract]))
            self.dot_ops += 1
            self.dot_flops += 2.0 * out_size * k
        elif name == "conv_general_dilated":
            rhs_shape = np.shape(invals[1])
            out_features = rhs_shape[eqn.params["dimension_numbers"].rhs_spec[0]]
            self.dot_ops += 1
            self.dot_flops += 2.0 * out_size * int(np.prod(rhs_shape)) / max(out_features, 1)
        elif name not in _DATA_MOVEMENT:
            self.other_flops += out_size

    @property
    def dot_fraction(self) -> float | None:
        total = self.dot_flops + self.other_flops
        return self.dot_flops / total if total else None
