"""Write the golden frozen model tests/data/golden_v1.nbc and its input/expected output.

Made once with nbcompile format 1 (JAX 0.10.2, CPU) by running, from the repository root:

    JAX_PLATFORMS=cpu .venv/bin/python tests/frozen/make_golden.py

Do NOT regenerate it for a new nbcompile version: the point of the file is that every later
version keeps loading what version 1 wrote. A new format version adds a new golden_vN file.
The model: a two-layer tanh MLP predict(params, x) with a closed-over 2 KB table (so the file
has a hoisted const_0), lowered for cpu, cuda and tpu.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
import numpy as np

DATA = Path(__file__).resolve().parents[1] / "data"
rng = np.random.default_rng(20261130)
TABLE = rng.standard_normal((16, 32), dtype=np.float32)


def predict(params, x):
    h = jnp.tanh(x @ params["w1"] + params["b1"][None, :])
    return (h @ TABLE) @ params["w2"]


def main() -> None:
    from nbcompile.frozen import freeze

    params = {
        "w1": rng.standard_normal((8, 16), dtype=np.float32),
        "b1": rng.standard_normal(16, dtype=np.float32),
        "w2": rng.standard_normal((32, 4), dtype=np.float32),
    }
    x = rng.standard_normal((3, 8), dtype=np.float32)
    # The golden file predates the symbolic batch dimension: it has static shapes.
    result = freeze(
        predict, params, x, path=DATA / "golden_v1.nbc", name="golden_v1", batch="static"
    )
    np.save(DATA / "golden_v1_input.npy", x, allow_pickle=False)
    np.save(
        DATA / "golden_v1_output.npy", np.asarray(jax.jit(predict)(params, x)), allow_pickle=False
    )
    print(result.text())


if __name__ == "__main__":
    main()
