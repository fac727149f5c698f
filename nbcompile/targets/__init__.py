"""Hardware targets: compile for CPU, GPU and TPU — with or without the device — and for meshes.

    t = resolve_target(backend="tpu", topology="v5e:2x2", mesh="2x2")
    tc = compile_for_target(fn, args, t, shard_specs={"x": "data,None"})
    tc.hlo_text, tc.cost, tc.memory, tc.collectives(), t.note
    print(compare([("CPU", cpu.hlo_text, cpu.cost, cpu.memory),
                   ("TPU v5e", tc.hlo_text, tc.cost, tc.memory)]).text())

See ``docs/targets.md``.
"""

from __future__ import annotations

from ._collectives import collectives, expand_replica_groups
from ._compare import Comparison, compare, hlo_summary
from ._compile import TargetCompile, compile_for_target
from ._gpu_configs import GPU_TARGETS, GpuSpec, gpu_target_config
from ._mesh import parse_mesh, parse_shard_specs
from ._resolve import BACKENDS, TPU_GENERATIONS, Target, resolve_target

__all__ = [
    "BACKENDS",
    "GPU_TARGETS",
    "TPU_GENERATIONS",
    "Comparison",
    "GpuSpec",
    "Target",
    "TargetCompile",
    "collectives",
    "compare",
    "compile_for_target",
    "expand_replica_groups",
    "gpu_target_config",
    "hlo_summary",
    "parse_mesh",
    "parse_shard_specs",
    "resolve_target",
]
