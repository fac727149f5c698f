"""NVIDIA GPU target descriptions for compiling without the GPU (deviceless XLA:GPU).

XLA:GPU needs a ``GpuTargetConfigProto`` (text format) to compile for a GPU that is not here:
the device's compute capability, SM count, memory sizes and bandwidth, clock, shared memory and
register limits. The figures below come from NVIDIA's public product specifications (one SXM
SKU per generation); a real machine of the same generation differs in a few fields (e.g. memory
actually free), which does not change what XLA emits. Only fields that jaxlib 0.10's
``stream_executor.GpuDeviceInfoProto`` declares are written: unknown fields are rejected.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GPU_TARGETS", "GpuSpec", "gpu_target_config"]

_KIB = 1024
_MIB = 1024 * 1024
_GIB = 1024 * 1024 * 1024


@dataclass(frozen=True)
class GpuSpec:
    """Public specification figures of one NVIDIA data-centre GPU."""

    description: str
    compute_capability: tuple[int, int]
    sm_count: int
    fp32_cores_per_sm: int
    shared_memory_per_sm: int
    shared_memory_per_block_optin: int
    l2_cache_bytes: int
    memory_bytes: int
    memory_bandwidth: int  # bytes per second
    boost_clock_ghz: float
    cudnn: tuple[int, int] = (9, 0)


GPU_TARGETS: dict[str, GpuSpec] = {
    "v100": GpuSpec(
        "Tesla V100-SXM2-16GB",
        (7, 0),
        80,
        64,
        96 * _KIB,
        96 * _KIB,
        6 * _MIB,
        16 * _GIB,
        900_000_000_000,
        1.53,
        (8, 9),
    ),
    "a100": GpuSpec(
        "NVIDIA A100-SXM4-80GB",
        (8, 0),
        108,
        64,
        164 * _KIB,
        163 * _KIB,
        40 * _MIB,
        80 * _GIB,
        2_039_000_000_000,
        1.41,
    ),
    "h100": GpuSpec(
        "NVIDIA H100 80GB HBM3",
        (9, 0),
        132,
        128,
        228 * _KIB,
        227 * _KIB,
        50 * _MIB,
        80 * _GIB,
        3_350_000_000_000,
        1.98,
    ),
    "h200": GpuSpec(
        "NVIDIA H200",
        (9, 0),
        132,
        128,
        228 * _KIB,
        227 * _KIB,
        50 * _MIB,
        141 * _GIB,
        4_800_000_000_000,
        1.98,
    ),
    "b200": GpuSpec(
        "NVIDIA B200",
        (10, 0),
        148,
        128,
        228 * _KIB,
        227 * _KIB,
        126 * _MIB,
        180 * _GIB,
        8_000_000_000_000,
        1.965,
    ),
}


def _has_dnn_version_info() -> bool:
    """Whether this jaxlib's ``GpuTargetConfigProto`` has ``dnn_version_info`` (jaxlib 0.10.2
    does; 0.12 dropped it and rejects a config that names it). Read from jaxlib's version: the
    proto's own descriptor is not public (tests/targets/test_targets_gpu.py reads it from the
    library to check this)."""
    import jaxlib

    version = tuple(int(p) for p in jaxlib.__version__.split(".")[:2] if p.isdigit())
    return version < (0, 12)


def gpu_target_config(name: str) -> str:
    """The ``GpuTargetConfigProto`` text for a named GPU (``GPU_TARGETS`` key)."""
    spec = GPU_TARGETS[name]
    major, minor = spec.compute_capability
    fields = {
        "threads_per_block_limit": 1024,
        "threads_per_warp": 32,
        "shared_memory_per_block": 48 * _KIB,
        "shared_memory_per_core": spec.shared_memory_per_sm,
        "threads_per_core_limit": 2048,
        "core_count": spec.sm_count,
        "fpus_per_core": spec.fp32_cores_per_sm,
        "block_dim_limit_x": 2**31 - 1,
        "block_dim_limit_y": 65535,
        "block_dim_limit_z": 65535,
        "memory_bandwidth": spec.memory_bandwidth,
        "l2_cache_size": spec.l2_cache_bytes,
        "clock_rate_ghz": spec.boost_clock_ghz,
        "device_memory_size": spec.memory_bytes,
        "shared_memory_per_block_optin": spec.shared_memory_per_block_optin,
    }
    lines = ["gpu_device_info {"]
    lines += [f"  {key}: {value}" for key, value in fields.items()]
    lines += [f"  cuda_compute_capability {{ major: {major} minor: {minor} }}"]
    lines += ["  registers_per_core_limit: 65536", "  registers_per_block_limit: 65536", "}"]
    lines += ['platform_name: "CUDA"']
    if _has_dnn_version_info():
        lines += [f"dnn_version_info {{ major: {spec.cudnn[0]} minor: {spec.cudnn[1]} }}"]
    lines += [f'device_description_str: "{spec.description}"']
    return "\n".join(lines) + "\n"
