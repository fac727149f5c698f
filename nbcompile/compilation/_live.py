"""The live call of a Compilation: every model's arrays as the model holds them now.

A Compilation keeps the example call it was compiled with. A model's weights are arrays the model
holds, and training replaces them: Keras' ``model.fit`` and a Flax NNX optimizer write new arrays
into the model's variables and, where their step donates its inputs, delete the old ones. So a
measurement run later on the same Compilation (``run_profile``, ``freeze``, ``run_bench``,
``run_debug``, ``run_ablation``) reads every model's variables again, as a re-run of the cell
does; the program is the same as long as their shapes and dtypes are.

Arrays that are not held by a model object (a plain ``params`` dict, a Flax Linen variables dict,
an Equinox model whose trained copy was bound to a new name) cannot be found again from here:
where one of them was deleted (donated to another jit) the measurement stops with ``NBC212``,
naming the argument and the fix, instead of JAX's ``Array has been deleted`` from deep inside.
"""

from __future__ import annotations

from typing import Any

import jax

from ..capture.models import Adapted, _splitter, model_kind
from ..errors import CaptureError

__all__ = ["live_args", "require_alive"]

_AGAIN = (
    "run the %%compile cell again (nbcompile.compile(...) in Python): it reads the arrays "
    "as they are now"
)


def _signature(tree: Any) -> tuple[Any, list[tuple[Any, Any]]]:
    leaves, structure = jax.tree_util.tree_flatten(tree)
    return structure, [(getattr(x, "shape", None), getattr(x, "dtype", None)) for x in leaves]


def live_args(adapted: Adapted, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``args`` with each model's parameters and state read from the model now.

    Raises ``NBC212`` when a model's variables no longer have the shapes, dtypes or structure
    the program was compiled for (the compiled program cannot take them)."""
    if not adapted.models or len(adapted.params_argnums) != len(adapted.models):
        return args
    states = adapted.state_argnums
    if len(states) != len(adapted.models):
        return args
    new = list(args)
    for model, p, s in zip(adapted.models, adapted.params_argnums, states, strict=True):
        kind = model_kind(model)
        if kind in (None, "flax-linen"):  # Linen keeps no arrays: its variables are the user's
            continue
        split = _splitter(kind, model)
        for index, value in ((p, split.params), (s, split.state)):
            if index >= len(new):
                continue
            if _signature(value) != _signature(new[index]):
                name = getattr(split, "name", type(model).__name__)
                raise CaptureError(
                    f"the variables of {name} changed shape, dtype or structure since it was "
                    "compiled: this compilation's program cannot take them",
                    code="NBC212",
                    hint=_AGAIN,
                )
            new[index] = value
    return tuple(new)


def _deleted(tree: Any) -> list[str]:
    found = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if isinstance(leaf, jax.Array) and leaf.is_deleted():
            found.append(jax.tree_util.keystr(path))
    return found


def require_alive(
    adapted: Adapted, args: tuple[Any, ...], kwargs: dict[str, Any], what: str
) -> None:
    """``NBC212`` naming the arguments whose arrays were deleted since the compile."""
    names = adapted.arg_names
    gone = [
        f"{names[i] if i < len(names) else f'args[{i}]'}{path}"
        for i, a in enumerate(args)
        for path in _deleted(a)
    ]
    gone += [f"{k}{path}" for k, v in kwargs.items() for path in _deleted(v)]
    if not gone:
        return
    shown = ", ".join(gone[:3]) + (f" and {len(gone) - 3} more" if len(gone) > 3 else "")
    raise CaptureError(
        f"cannot {what}: {shown} {'was' if len(gone) == 1 else 'were'} deleted after the "
        "compile (donated to another jitted call, e.g. a training step that donates its "
        "inputs), and this compilation cannot read them again",
        code="NBC212",
        hint=_AGAIN,
    )
