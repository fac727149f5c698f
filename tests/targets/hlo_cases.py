"""Real optimised modules for the HLO reader tests: small programs compiled for CPU, 8 virtual CPU
devices, TPU v5e (deviceless) and GPU (deviceless).

``python _targets_hlo_cases.py KIND`` prints ``{name: {"hlo": text, "hosts": [...] | None}}`` as
JSON; the 8-device CPU cases need ``XLA_FLAGS=--xla_force_host_platform_device_count=8`` set
before JAX starts, so the tests run them in a child process through this entry point.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

if __package__:  # imported by the tests
    from .helpers import (
        MLP_SHARDING,
        branch,
        collective_args,
        collective_program,
        loop,
        loop_args,
        mlp,
        mlp_args,
        train_step,
    )
else:  # run as a script in a child process
    sys.path.insert(0, os.path.dirname(__file__))
    from helpers import (
        MLP_SHARDING,
        branch,
        collective_args,
        collective_program,
        loop,
        loop_args,
        mlp,
        mlp_args,
        train_step,
    )

W2_SHARDED = {"params.w2": "data,None"}
#: (name, program, mesh or None, shard specs); ``collectives`` builds its program from the mesh
PROGRAMS: dict[str, list[tuple[str, str, str | None, dict[str, str] | None]]] = {
    "cpu": [
        ("mlp", "mlp", None, None),
        ("loop", "loop", None, None),
        ("branch", "branch", None, None),
        ("train", "train", None, None),
    ],
    "cpu8": [
        ("mlp", "mlp", "4x2", MLP_SHARDING),
        ("train", "train", "4x2", MLP_SHARDING),
        ("collectives", "collectives", "8", {"x": "data"}),
    ],
    "tpu": [
        ("mlp", "mlp", None, None),
        ("loop", "loop", None, None),
        ("branch", "branch", None, None),
        ("train", "train", None, None),
        ("mesh4_mlp", "mlp", "4", W2_SHARDED),
        ("mesh4_collectives", "collectives", "4", {"x": "data"}),
    ],
    # v5e:4x4 is four hosts of four chips: the gradient's all-reduce over the 2-device "data"
    # axis stays on one host, the one over "model" does not
    "tpu4x4": [("train", "train", "8x2:model,data", MLP_SHARDING)],
    "gpu": [
        ("mlp", "mlp", None, None),
        ("train", "train", None, None),
        ("mesh8_collectives", "collectives", "8", {"x": "data"}),
    ],
}


def _options(kind: str, mesh: str | None, gpu: str) -> dict[str, Any]:
    """``nbcompile.compile`` / ``resolve_target`` options of one case kind."""
    if kind in ("cpu", "cpu8"):
        return {"mesh": mesh}
    if kind == "tpu":
        return {"backend": "tpu", "topology": "v5e:2x2", "mesh": mesh}
    if kind == "tpu4x4":
        return {"backend": "tpu", "topology": "v5e:4x4", "mesh": mesh}
    return {"backend": "gpu", "gpu": gpu, "topology": "1x2x4" if mesh else None, "mesh": mesh}


def compile_cases(kind: str, gpu: str = "h100") -> dict[str, dict[str, Any]]:
    """``{name: {"hlo": optimised HLO text, "hosts": process index per mesh device | None}}``."""
    import nbcompile
    from nbcompile.targets import resolve_target

    out: dict[str, dict[str, Any]] = {}
    for name, program, mesh, specs in PROGRAMS[kind]:
        options = _options(kind, mesh, gpu)
        target = resolve_target(**options)
        if program == "collectives":
            fn, args = collective_program(target.mesh), collective_args(target.mesh)
        else:
            fn = {"mlp": mlp, "loop": loop, "branch": branch, "train": train_step}[program]
            args = loop_args() if program in ("loop", "branch") else mlp_args()
        c = nbcompile.compile(fn, *args, shard=specs, **options)
        devices = list(target.mesh.devices.flat) if target.mesh is not None else None
        hosts = [int(d.process_index) for d in devices] if devices is not None else None
        out[name] = {"hlo": c.hlo, "hosts": hosts}
    return out


if __name__ == "__main__":
    import jax

    jax.config.update("jax_numpy_rank_promotion", "raise")
    jax.config.update("jax_numpy_dtype_promotion", "strict")
    print(json.dumps(compile_cases(sys.argv[1])))
