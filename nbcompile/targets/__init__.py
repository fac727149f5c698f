"""Hardware targets: which device a compile is for (present, deviceless or lowered only),
how the arguments are placed on it (meshes, shardings), collectives, and comparisons.

    t = resolve_target(backend="tpu", topology="v5e:2x2", mesh="2x2")
    placed = place_args(args, {}, t, names=["params", "x"], static=set(),
                        specs=parse_shard_specs({"x": "data,None"}, t.mesh.axis_names))

Compiling itself is :func:`nbcompile.stages.run_stages` — one path for every target. See
``docs/targets.md``.
"""

from __future__ import annotations

from ._collectives import collectives, expand_replica_groups
from ._compare import Comparison, compare, hlo_summary
from ._gpu_configs import GPU_TARGETS, GpuSpec, gpu_target_config
from ._mesh import parse_mesh, parse_shard_specs
from ._placement import (
    Placement,
    abstract_leaf,
    output_shardings,
    place_args,
    program_collectives,
    spec_text,
)
from ._resolve import BACKENDS, TPU_GENERATIONS, Target, resolve_target
from ._summary import infer_mesh, target_label, target_summary

__all__ = [
    "BACKENDS",
    "GPU_TARGETS",
    "TPU_GENERATIONS",
    "Comparison",
    "GpuSpec",
    "Placement",
    "Target",
    "abstract_leaf",
    "collectives",
    "compare",
    "expand_replica_groups",
    "gpu_target_config",
    "hlo_summary",
    "infer_mesh",
    "output_shardings",
    "parse_mesh",
    "parse_shard_specs",
    "place_args",
    "program_collectives",
    "resolve_target",
    "spec_text",
    "target_label",
    "target_summary",
]
