"""Run in a fresh process with 8 virtual CPU devices; prints one JSON result on stdout.

XLA_FLAGS=--xla_force_host_platform_device_count=8 must be set before JAX starts, which is why
the mesh tests run this file in a subprocess.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import jax
from _targets_models import MLP_SHARDING, mlp, mlp_args

from nbcompile.errors import TargetError
from nbcompile.targets import compile_for_target, resolve_target

jax.config.update("jax_numpy_rank_promotion", "raise")
params, x = mlp_args()
target = resolve_target(mesh=sys.argv[1] if len(sys.argv) > 1 else "4x2")
tc = compile_for_target(mlp, (params, x), target, shard_specs=MLP_SHARDING)
try:
    resolve_target(mesh="4x4")
    too_big = None
except TargetError as err:
    too_big = err.code
print(
    json.dumps(
        {
            "devices": jax.device_count(),
            "mesh": dict(target.mesh.shape),
            "hosts": target.hosts,
            "input_shardings": tc.input_shardings,
            "output_shardings": tc.output_shardings,
            "per_device_shapes": tc.per_device_shapes,
            "collectives": tc.collectives(),
            "too_big": too_big,
        }
    )
)
