"""Write the golden frozen model tests/data/golden_v1.nbc and its input/expected output.

Made once with nbcompile format 1 (JAX 0.10.2, CPU) by running, from the repository root:

    JAX_PLATFORMS=cpu .venv/bin/python tests/frozen/make_golden.py

Do NOT regenerate it for a new nbcompile version: the point of the file is that every later
version keeps loading what version 1 wrote. A new format version adds a new golden_vN file.
The model: a two-layer tanh MLP predict(params, x) with a closed-over 2 KB table (so the file
has a hoisted const_0), lowered for cpu, cuda and tpu.

The expected output is what XLA:CPU computed on the writing machine; another CPU may round
differently (XLA:CPU's kernels depend on the instruction set), so golden_vN_machine.json records
the machine (:func:`machine`) and tests/frozen/test_golden.py compares at float32's error bound.
golden_v1 predates that record: its JSON says where its output was reproduced bit for bit.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

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


#: Instruction-set extensions that change XLA:CPU's generated code (vector width, FMA).
ISA_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "asimd",
    "sve",
)


def machine() -> dict[str, Any]:
    """The machine computing an expected output: CPU model, the ISA flags XLA:CPU uses, and the
    versions of JAX and jaxlib (Linux /proc/cpuinfo; elsewhere the flags stay empty)."""
    import jaxlib

    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    model = value.strip()
                elif key.strip() in ("flags", "Features"):
                    flags |= set(value.split())
    except OSError:
        pass
    return {
        "cpu": model,
        "arch": platform.machine(),
        "isa": [f for f in ISA_FLAGS if f in flags],
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "xla_device": jax.devices("cpu")[0].device_kind,
    }


def main(name: str = "golden_v1") -> None:
    """Write ``name``.nbc and its input, output and machine record. ``golden_v1`` was written
    with JAX 0.10.2; ``golden_v1_jax012`` (same format version, written with JAX 0.12.0.1:
    ``make_golden.py golden_v1_jax012``) is the newer stack's file that the older one is
    handed in tests/frozen/test_cross_version.py."""
    from nbcompile.frozen import freeze

    params = {
        "w1": rng.standard_normal((8, 16), dtype=np.float32),
        "b1": rng.standard_normal(16, dtype=np.float32),
        "w2": rng.standard_normal((32, 4), dtype=np.float32),
    }
    x = rng.standard_normal((3, 8), dtype=np.float32)
    # The golden file predates the symbolic batch dimension: it has static shapes.
    result = freeze(predict, params, x, path=DATA / f"{name}.nbc", name=name, batch="static")
    np.save(DATA / f"{name}_input.npy", x, allow_pickle=False)
    np.save(
        DATA / f"{name}_output.npy", np.asarray(jax.jit(predict)(params, x)), allow_pickle=False
    )
    record = {"written_on": machine()}
    (DATA / f"{name}_machine.json").write_text(json.dumps(record, indent=2) + "\n")
    print(result.text())


if __name__ == "__main__":
    import sys

    main(*sys.argv[1:2])
