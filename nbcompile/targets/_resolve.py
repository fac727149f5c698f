"""Which hardware a compile is for: the device here, a deviceless topology, or StableHLO only.

``resolve_target`` turns ``--backend/--topology/--target/--mesh`` into a :class:`Target`:
- the backend is **present** (its devices are here): compile for them;
- else **deviceless**: the optional compiler is installed (libtpu for TPU, the CUDA plugin for
  GPU) and XLA compiles for a topology description without the device;
- else **lower_only**: only StableHLO for that platform, with a one-line ``note`` naming the
  command that adds the compiler. That is not an error.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

from .._compat import captured_stderr, tpu_plugin_without_profiler
from ..errors import TargetError
from ._gpu_configs import GPU_TARGETS, gpu_target_config
from ._mesh import build_mesh, parse_mesh

__all__ = ["BACKENDS", "TPU_GENERATIONS", "Target", "resolve_target"]

BACKENDS = {"cpu": "cpu", "gpu": "cuda", "cuda": "cuda", "tpu": "tpu"}
TPU_GENERATIONS = ("v2", "v3", "v4", "v5e", "v5p", "v6e")
DEFAULT_TPU_TOPOLOGY = "v5e:2x2"
DEFAULT_GPU_TARGET = "h100"
_TPU_TOPOLOGY = re.compile(r"^(v\d+[a-z]*)[:=_](\d+(?:x\d+){1,2})$")
_GPU_TOPOLOGY = re.compile(r"^\d+x\d+x\d+$")
MAX_TPU_CHIPS = 16_384  # larger than the largest public slice (v5p: 8,960 chips)
_V5E_SHAPES = ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16")


@dataclass
class Target:
    """Where a compile goes. Exactly one of ``present`` / ``deviceless`` / ``lower_only`` holds.

    ``devices`` are the devices compiled for (real ones, or compile-only topology devices;
    empty when ``lower_only``); ``mesh`` is a ``jax.sharding.Mesh`` over them (an
    ``AbstractMesh`` when ``lower_only``) or None; ``hosts`` counts the processes (hosts) the
    devices belong to; ``note`` says in one line what could not be done and how to add it.
    """

    platform: str
    present: bool
    deviceless: bool
    lower_only: bool
    note: str | None = None
    devices: list[Any] = field(default_factory=list)
    mesh: Any | None = None
    topology: str | None = None
    gpu: str | None = None
    label: str = ""
    mesh_spec: str | None = None

    @property
    def hosts(self) -> int:
        """Number of hosts (JAX processes) the devices span; 1 when unknown."""
        return len({getattr(d, "process_index", 0) for d in self.devices}) or 1


def _libtpu_available() -> bool:
    """libtpu installed (``nbcompile[tpu]``): TPU compiles work without a TPU."""
    return importlib.util.find_spec("libtpu") is not None


def _cuda_plugin_available() -> bool:
    """The JAX CUDA plugin (``jax[cuda12]``) is importable: GPU compiles work without a GPU."""
    names = ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_plugins.xla_cuda12")
    for name in names:
        try:
            if importlib.util.find_spec(name) is not None:
                return True
        except (ImportError, ValueError):
            continue
    return False


def _local_devices(platform: str) -> list[Any]:
    """The devices of ``platform`` in this process, or [] when that backend is not running."""
    import jax

    try:
        return list(jax.devices(platform))
    except RuntimeError:
        return []


@functools.lru_cache(maxsize=16)
def _topology_devices(platform: str, name: str, config: str | None) -> tuple[Any, ...]:
    from jax.experimental import topologies

    if platform == "tpu":
        # libtpu takes /tmp/libtpu_lockfile, so a second process (another notebook kernel, a
        # test worker) could not compile for TPU at all; compile-only use touches no TPU.
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    with captured_stderr() as noise:
        try:
            if platform == "tpu":  # libtpu's compiler only: its profiler would crash ours
                with tpu_plugin_without_profiler():
                    topo = topologies.get_topology_desc(topology_name=name, platform="tpu")
            else:
                topo = topologies.get_topology_desc(
                    platform="cuda", topology=name, target_config=config
                )
        except Exception as err:  # JaxRuntimeError / NotImplementedError from the plugin
            raise _topology_error(platform, name, err, noise.text) from err
    return tuple(topo.devices)


def _topology_error(platform: str, name: str, err: Exception, noise: str) -> TargetError:
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    legal = (
        f"GENERATION:SHAPE with GENERATION in {', '.join(TPU_GENERATIONS)}, e.g. v5e:2x2, v5e:4x4, v4:2x2x1"
        if platform == "tpu"
        else "SLICESxHOSTSxGPUS, e.g. 1x1x1, 1x2x4"
    )
    return TargetError(f"{platform} topology {name!r} was refused: {first}", hint=f"use {legal}")


def _check_backend(backend: str | None, topology: str | None, gpu: str | None) -> str:
    import jax

    if backend is None:
        if topology and _TPU_TOPOLOGY.match(topology):
            return "tpu"
        if gpu is not None or topology:
            return "cuda"
        default = jax.default_backend()
        return "cuda" if default == "gpu" else default
    key = str(backend).lower()
    if key not in BACKENDS:
        raise TargetError(f"unknown backend {backend!r}", hint="use one of: cpu, gpu, tpu")
    platform = BACKENDS[key]
    if platform == "cpu" and (topology or gpu):
        raise TargetError(
            "--topology/--target describe a TPU or GPU, not the CPU",
            hint="add --backend tpu (with --topology v5e:2x2) or --backend gpu (with --target h100)",
        )
    if platform == "tpu" and gpu is not None:
        raise TargetError("--target names a GPU", hint="for a TPU use --topology, e.g. v5e:2x2")
    return platform


def _tpu_topology(topology: str | None, needed: int) -> tuple[str, bool]:
    """(topology name, chosen by us) for a TPU compile needing ``needed`` devices."""
    if topology is None:
        if needed <= 4:
            return DEFAULT_TPU_TOPOLOGY, True
        shape = next((s for s in _V5E_SHAPES if math.prod(map(int, s.split("x"))) >= needed), None)
        if shape is None:
            raise TargetError(
                f"no default TPU topology has {needed} chips",
                code="NBC601",
                hint="pass --topology, e.g. v5p:8x8x8",
            )
        return f"v5e:{shape}", True
    match = _TPU_TOPOLOGY.match(topology.strip())
    legal = (
        f"use GENERATION:SHAPE with GENERATION in {', '.join(TPU_GENERATIONS)}, "
        "e.g. v5e:2x2, v5e:4x4 (4 hosts), v4:2x2x1, v5p:2x2x2"
    )
    if not match or match.group(1) not in TPU_GENERATIONS:
        raise TargetError(f"unknown TPU topology {topology!r}", hint=legal)
    dims = [int(d) for d in match.group(2).split("x")]
    chips = math.prod(dims)
    if min(dims) < 1 or chips > MAX_TPU_CHIPS:
        why = (
            "every dimension needs at least one chip"
            if min(dims) < 1
            else (f"{chips:,} chips is more than any TPU slice ({MAX_TPU_CHIPS:,})")
        )
        raise TargetError(f"invalid TPU topology {topology!r}: {why}", hint=legal)
    return topology.strip(), False


def _gpu_config(gpu: str | None) -> tuple[str, str]:
    """(label, GpuTargetConfigProto text) for ``--target``: a GPU name or a .txtpb file."""
    name = (gpu or DEFAULT_GPU_TARGET).strip()
    if name.lower() in GPU_TARGETS:
        return name.lower(), gpu_target_config(name.lower())
    if os.path.isfile(name):
        with open(name, encoding="utf-8") as handle:
            return os.path.basename(name), handle.read()
    raise TargetError(
        f"unknown GPU target {gpu!r}",
        hint=f"use one of: {', '.join(GPU_TARGETS)} (or a GpuTargetConfigProto .txtpb file)",
    )


def _attach_mesh(t: Target, mesh_spec: tuple[tuple[int, ...], tuple[str, ...]] | None) -> Target:
    if mesh_spec is None:
        return t
    shape, names = mesh_spec
    t.mesh_spec = "x".join(map(str, shape)) + ":" + ",".join(names)
    needed = math.prod(shape)
    if t.lower_only:
        from jax.sharding import AbstractMesh, AxisType

        t.mesh = AbstractMesh(shape, names, axis_types=(AxisType.Auto,) * len(names))
        return t
    if needed > len(t.devices):
        hint = (
            f"start Python with XLA_FLAGS=--xla_force_host_platform_device_count={needed} "
            "(a fresh kernel: it must be set before JAX starts)"
            if t.platform == "cpu"
            else "pass a larger --topology"
        )
        raise TargetError(
            f"mesh {'x'.join(map(str, shape))} needs {needed} devices but {t.label} has "
            f"{len(t.devices)}",
            code="NBC601",
            hint=hint,
        )
    t.mesh = build_mesh(shape, names, t.devices, physical=t.platform == "tpu")
    return t


def resolve_target(
    backend: str | None = None,
    topology: str | None = None,
    gpu: str | None = None,
    mesh: str | None = None,
) -> Target:
    """The :class:`Target` for ``--backend``, ``--topology``, ``--target`` (``gpu``: a GPU
    model such as ``h100``) and ``--mesh``.

    Raises :class:`~nbcompile.errors.TargetError`: NBC600 for an unknown backend, topology or
    GPU target (listing the legal values), NBC601 for a bad mesh.
    """
    platform = _check_backend(backend, topology, gpu)
    mesh_spec = parse_mesh(mesh) if mesh is not None else None
    needed = math.prod(mesh_spec[0]) if mesh_spec else 1
    explicit = topology is not None or gpu is not None
    local = _local_devices(platform)
    if platform == "cpu" or (local and not explicit):
        label = "gpu" if platform == "cuda" else platform
        t = Target(platform, True, False, False, devices=local, label=label)
        return _attach_mesh(t, mesh_spec)
    if platform == "tpu":
        name, chosen = _tpu_topology(topology, needed)
        label = f"tpu {name}"
        if not _libtpu_available():
            note = (
                "no TPU here and libtpu is not installed: StableHLO only; to compile for "
                'TPU without one: pip install "nbcompile[tpu]"'
            )
            t = Target("tpu", False, False, True, note=note, topology=name, label=label)
            return _attach_mesh(t, mesh_spec)
        devices = list(_topology_devices("tpu", name, None))
        why = "default topology; pass --topology to choose" if chosen else "deviceless"
        note = f"compiled for {label} without a TPU ({why}): it cannot run here"
    else:
        gpu, config = _gpu_config(gpu)
        name = topology.strip() if topology else f"1x1x{needed}"
        if not _GPU_TOPOLOGY.match(name):
            raise TargetError(
                f"unknown GPU topology {topology!r}",
                hint="use SLICESxHOSTSxGPUS, e.g. 1x1x1 or 1x2x4 (2 hosts of 4 GPUs)",
            )
        label = f"gpu {gpu}" + ("" if name == "1x1x1" else f" {name}")
        if not _cuda_plugin_available():
            import jax

            note = (
                f"no GPU here and the JAX CUDA plugin is not installed: StableHLO only; to "
                f'compile for GPU without one: pip install "jax[cuda12]=={jax.__version__}"'
            )
            t = Target("cuda", False, False, True, note=note, topology=name, gpu=gpu, label=label)
            return _attach_mesh(t, mesh_spec)
        devices = list(_topology_devices("cuda", name, config))
        note = f"compiled for {label} without a GPU (deviceless, no autotuning): it cannot run here"
    t = Target(
        platform,
        False,
        True,
        False,
        note=note,
        devices=devices,
        label=label,
        topology=name,
        gpu=None if platform == "tpu" else gpu,
    )
    return _attach_mesh(t, mesh_spec)
