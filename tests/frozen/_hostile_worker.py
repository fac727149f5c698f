"""Load, call and differentiate files, one by one, for `_supervise.run`.

    python _hostile_worker.py JOB.json --from INDEX

JOB.json holds ``{"cases": [{"id", "path", "max_bytes", "call", "grad"}, ...]}``. For each case
from INDEX on it prints ``START id``, then ``DONE id {json}`` with the outcomes of each step:
``load`` (an NBC code, or "loaded"), ``call`` ("ran", an NBC code, or "ESCAPED: <type>"),
``grad`` (the same) and ``load_seconds``. Only FreezeError is an acceptable failure.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from nbcompile.errors import FreezeError
from nbcompile.frozen import _manifest, load
from nbcompile.frozen._batch import concrete_shape


def _zeros(model: Any) -> Any:
    leaves = [
        np.zeros(concrete_shape(leaf["shape"], 2), leaf["dtype"])
        for leaf in model.signature["inputs"]["leaves"]
    ]
    return _manifest.unflatten(model.signature["inputs"]["tree"], leaves)


def _step(fn: Any) -> str:
    try:
        jax.block_until_ready(fn())
        return "ran"
    except FreezeError as err:
        return err.code
    except BaseException as err:  # what the test exists to catch: anything but FreezeError
        return f"ESCAPED: {type(err).__name__}: {str(err)[:200]}"


def _loss(model: Any, inputs: Any) -> Any:
    def total(*xs: Any) -> Any:
        outs = jax.tree_util.tree_leaves(model(*xs))
        return sum(jnp.sum(o.astype(jnp.float32)) for o in outs)

    floats = [
        i
        for i, x in enumerate(jax.tree_util.tree_leaves(inputs))
        if np.issubdtype(x.dtype, np.floating)
    ]
    return lambda: jax.grad(total)(*inputs) if floats else jax.jvp(total, inputs, inputs)


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    start = time.perf_counter()
    try:
        model = load(case["path"], max_bytes=case.get("max_bytes"))
        out["load"] = "loaded"
    except FreezeError as err:
        out["load"] = err.code
        out["message"] = str(err)[:300]
        model = None
    except BaseException as err:
        out["load"] = f"ESCAPED: {type(err).__name__}: {str(err)[:200]}"
        model = None
    out["load_seconds"] = round(time.perf_counter() - start, 3)
    if model is not None and case.get("call", True):
        inputs = _zeros(model)
        out["call"] = _step(lambda: model(*inputs))
        if case.get("grad", True):
            out["grad"] = _step(_loss(model, inputs))
    return out


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    start = int(sys.argv[sys.argv.index("--from") + 1])
    for case in job["cases"][start:]:
        print(f"START {case['id']}", flush=True)
        print(f"DONE {case['id']} {json.dumps(run_case(case))}", flush=True)


if __name__ == "__main__":
    main()
