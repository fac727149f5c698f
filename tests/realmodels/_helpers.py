"""What every real-model check shares: the case record, running cells the way a notebook user
does (model cells first, then a ``%%compile`` cell) in the session's IPython shell, comparing
pytrees leaf by leaf, and loading frozen files in a fresh process."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np

from ..helpers import child_json

# Keras picks its backend when first imported, by a cell of a case.
os.environ["KERAS_BACKEND"] = "jax"

#: forward and gradient results must match the library's own jit / grad this closely
TOL = 1e-5
#: a deviceless TPU compile every case must pass
TPU = "--backend tpu --topology v5e:2x2"


@dataclass(frozen=True)
class Case:
    """One model, re-implemented after the architecture of a library's example.

    ``credit``: the example whose architecture the case follows. ``cells``: the model code, then
    a setup cell (example data, a scalar loss where the model's loss returns ``(loss, aux)``).
    ``forward``/``loss``: the call a ``%%compile`` cell compiles (without / with ``--grad``);
    ``forward_ref`` and ``grad_ref``: expressions giving the same through the library's own jit
    and value-and-grad (``grad_ref`` gives ``(value, grads)`` with grads shaped like nbcompile's).
    """

    name: str
    credit: str
    cells: tuple[str, ...]
    forward: str
    forward_ref: str
    loss: str
    grad_ref: str
    grad: str = "0"


_DEFINED: dict[str, dict[str, Any]] = {}


def use(shell: Any, case: Case) -> None:
    """A namespace holding what the case's cells define (run once per session, then restored:
    other tests reset the shared shell)."""
    shell.reset(new_session=False)
    saved = _DEFINED.get(case.name)
    if saved is not None:
        shell.user_ns.update(saved)
        return
    if "keras" in case.name:
        # Keras numbers automatic layer names per process (dense, dense_1, ...): start from a
        # fresh count, as the example's own notebook does, whatever ran in this process before
        import keras

        keras.backend.clear_session()
    for text in case.cells:
        res = shell.run_cell(text)
        assert res.success, f"{case.name}: a model cell failed: {res.error_in_exec!r}"
    _DEFINED[case.name] = dict(shell.user_ns)


def compile_cell(shell: Any, options: str, call: str) -> Any:
    """Run ``%%compile -q OPTIONS`` on ``call``; the Compilation (the cell must succeed)."""
    import nbcompile

    res = shell.run_cell(f"%%compile -q {options}\n{call}\n")
    if not res.success:
        err = res.error_in_exec or res.error_before_exec
        cause = getattr(err, "__cause__", None)
        raise AssertionError(f"%%compile {options} {call} failed: {err!r} (cause: {cause!r})")
    return nbcompile.last()


def evaluate(shell: Any, expr: str) -> Any:
    """The value of ``expr`` in the user namespace (as a cell would compute it)."""
    res = shell.run_cell(f"_realmodels_value = {expr}")
    assert res.success, f"{expr}: {res.error_in_exec!r}"
    return shell.user_ns.pop("_realmodels_value")


def outputs(c: Any) -> Any:
    """What the compiled program returns on the compilation's (live) arguments."""
    return c.fn(*c.args, **c.kwargs)


def assert_close(got: Any, want: Any, what: str) -> None:
    """Same tree of leaves, each equal within TOL (relative and absolute)."""
    got_leaves, want_leaves = jax.tree.leaves(got), jax.tree.leaves(want)
    assert len(got_leaves) == len(want_leaves) and got_leaves, (
        f"{what}: {len(got_leaves)} leaves, the reference has {len(want_leaves)}"
    )
    for i, (a, b) in enumerate(zip(got_leaves, want_leaves, strict=True)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, f"{what}: leaf {i} has shape {a.shape}, reference {b.shape}"
        np.testing.assert_allclose(a, b, rtol=TOL, atol=TOL, err_msg=f"{what}: leaf {i}")


# --- frozen files, loaded in a fresh process --------------------------------------------------


def frozen_inputs(c: Any) -> list[Any]:
    """The arguments a frozen file of ``c`` is called with: those not stored as weights (the
    default, with no model weights: every argument but the last is stored), then keywords."""
    weights = c.adapted.weights_argnums
    args = list(c.args)
    inputs = [a for i, a in enumerate(args) if i not in weights] if weights else args[-1:]
    return inputs + list(c.kwargs.values())


def encode(tree: Any, leaves: list[np.ndarray]) -> Any:
    """A JSON description of a pytree of lists, tuples and dicts of arrays; arrays go to
    ``leaves`` (the child rebuilds the tree with ``_fresh_load.decode``)."""
    if isinstance(tree, dict):
        return {"dict": {str(k): encode(v, leaves) for k, v in tree.items()}}
    if isinstance(tree, list | tuple):
        return {type(tree).__name__: [encode(v, leaves) for v in tree]}
    array = np.asarray(tree)
    # jax.jit takes float64 NumPy data and computes in float32 (x64 off); a frozen file refuses
    # it, so the inputs are given in the dtype the program takes (as jax.jit converts them)
    leaves.append(array.astype(jax.dtypes.canonicalize_dtype(array.dtype)))
    return {"leaf": len(leaves) - 1}


def save_frozen_case(name: str, c: Any, want: Any, folder: Path) -> dict[str, Any]:
    """Inputs and live outputs of one frozen file, for the fresh process."""
    leaves: list[np.ndarray] = []
    spec = encode(frozen_inputs(c), leaves)
    out = [np.asarray(x) for x in jax.tree.leaves(want)]
    arrays = {f"in{i}": a for i, a in enumerate(leaves)}
    arrays.update({f"out{i}": a for i, a in enumerate(out)})
    npz = folder / f"{name}.npz"
    np.savez(npz, **arrays)
    return {
        "name": name,
        "path": c.frozen.path,
        "npz": str(npz),
        "inputs": spec,
        "n_out": len(out),
        "tol": TOL,
    }


def load_in_fresh_process(cases: list[dict[str, Any]], folder: Path) -> dict[str, str]:
    """Run ``_fresh_load.py`` on the saved cases: name -> "ok" or what went wrong."""
    spec = folder / "cases.json"
    spec.write_text(json.dumps(cases))
    return child_json(
        [str(Path(__file__).with_name("_fresh_load.py")), str(spec)],
        env={"NBCOMPILE_CHECKED_DIR": str(folder / "checked-elsewhere")},
    )
