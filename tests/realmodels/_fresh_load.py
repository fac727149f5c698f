"""Child process of the real-model freeze test: in a fresh interpreter (nothing of the notebook
session) that has never seen the files (an empty folder of checked programs, as on another
machine: each program is probed and first lowered in forked children), load each ``.nbc`` file
with ``nbcompile.load``, call it on the saved inputs and compare with the live outputs saved by
the parent. Prints one JSON line: name -> "ok" or the
error. Usage: ``python _fresh_load.py cases.json``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import jax
import numpy as np

import nbcompile
from nbcompile.errors import NbcompileError


def decode(spec: Any, leaves: list[np.ndarray]) -> Any:
    """Inverse of ``_helpers.encode``."""
    if "leaf" in spec:
        return leaves[spec["leaf"]]
    if "dict" in spec:
        return {k: decode(v, leaves) for k, v in spec["dict"].items()}
    if "list" in spec:
        return [decode(v, leaves) for v in spec["list"]]
    return tuple(decode(v, leaves) for v in spec["tuple"])


def check(case: dict[str, Any]) -> str:
    data = np.load(case["npz"])  # plain arrays: no pickle
    n_in = sum(1 for key in data.files if key.startswith("in"))
    inputs = decode(case["inputs"], [data[f"in{i}"] for i in range(n_in)])
    try:
        model = nbcompile.load(case["path"])
        got = jax.tree.leaves(model(*inputs))
    except NbcompileError as err:
        return f"{type(err).__name__}: {err}"
    if model.metadata["written_here"]:
        return "loaded as a file written here: the checks for a file from elsewhere did not run"
    want = [data[f"out{i}"] for i in range(case["n_out"])]
    if len(got) != len(want):
        return f"{len(got)} outputs, the live model gives {len(want)}"
    tol = case["tol"]
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        a = np.asarray(a)
        if a.shape != b.shape or not np.allclose(a, b, rtol=tol, atol=tol):
            return f"output {i} differs from the live model: max |diff| " + (
                f"{np.max(np.abs(a - b)):.3g}" if a.shape == b.shape else f"shape {a.shape}"
            )
    return "ok"


if __name__ == "__main__":
    cases = json.loads(Path(sys.argv[1]).read_text())
    print(json.dumps({case["name"]: check(case) for case in cases}))
