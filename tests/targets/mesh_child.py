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
from helpers import MLP_SHARDING, mlp, mlp_args

import nbcompile
from nbcompile.errors import TargetError
from nbcompile.targets import resolve_target

jax.config.update("jax_numpy_rank_promotion", "raise")
params, x = mlp_args()
mesh = sys.argv[1] if len(sys.argv) > 1 else "4x2"
target = resolve_target(mesh=mesh)
c = nbcompile.compile(mlp, params, x, mesh=mesh, shard=MLP_SHARDING)
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
            "input_shardings": c.placement.input_shardings,
            "output_shardings": c.stages.output_shardings,
            "per_device_shapes": c.placement.per_device_shapes,
            "collectives": c.collectives,
            "too_big": too_big,
        }
    )
)
