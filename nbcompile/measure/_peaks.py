"""Machine peaks for the roofline: measured on this CPU, from vendor datasheets for GPUs/TPUs.

* **CPU** (``source="measured"``): two short micro-benchmarks through XLA, once per machine — a
  1024×1024×1024 f32 matmul for FLOP/s and an in-place streaming ``x * a + b`` for bytes/s
  (read + write) over 64 MiB, or twice the largest cache the CPU reports where that is more
  (up to 1 GiB: some machines report a 480 MiB L3, which holds 64 MiB), near-best of many calls. Cached as JSON under the user cache folder
  (``$NBCOMPILE_CACHE_DIR``, else ``$XDG_CACHE_HOME/nbcompile``, else ``~/.cache/nbcompile``;
  only a folder only this user can write, see ``nbcompile._dirs``) keyed by CPU model and
  core count; ``refresh=True`` measures again. Each figure is the
  fastest tenth of the calls made in a fixed time budget (about 1 s in all, with the compiles);
  the machine's load at the time is recorded, and a figure measured under load says so.
* **GPU / TPU** (``source="spec"``): dense (no sparsity) tensor-core / MXU peak and HBM
  bandwidth per chip from the vendor's datasheet named in each entry.
"""

from __future__ import annotations

import json
import os
import platform
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from nbcompile import _dirs

__all__ = ["GPU_SPECS", "TPU_SPECS", "Peak", "Peaks", "cpu_peaks", "spec_peaks"]

_VERSION = 2  # 2: the stream is sized from the caches. Bump when the measurement changes: old cache files are then measured again


@dataclass(frozen=True)
class Peak:
    """One peak figure, where it came from (``measured`` / ``spec``) and how."""

    value: float
    source: str
    detail: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Peaks:
    """The roof: peak FLOP/s and bytes/s of one device (``dtype``: what the FLOP/s is for)."""

    device: str
    flops_per_s: Peak
    bytes_per_s: Peak
    dtype: str = "f32"

    @property
    def ridge(self) -> float:
        """Arithmetic intensity (FLOP/byte) above which a kernel is compute-bound."""
        return self.flops_per_s.value / self.bytes_per_s.value

    def roof(self, intensity: float) -> float:
        """Attainable FLOP/s at ``intensity``: min(peak FLOP/s, intensity × peak bytes/s)."""
        return min(self.flops_per_s.value, intensity * self.bytes_per_s.value)

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "dtype": self.dtype,
            "ridge": self.ridge,
            "flops_per_s": self.flops_per_s.to_json(),
            "bytes_per_s": self.bytes_per_s.to_json(),
        }


# (f32 matmul FLOP/s, bf16 matmul FLOP/s, HBM bytes/s, datasheet). Dense figures: datasheets
# that quote "with sparsity" are halved. On Ampere and later XLA runs f32 dots on TF32 tensor
# cores by default (JAX's default matmul precision), so the f32 figure is the TF32 one.
GPU_SPECS: dict[str, tuple[float, float, float, str]] = {
    "v100": (15.7e12, 125e12, 900e9, "NVIDIA Tesla V100 SXM2 datasheet (FP32, FP16 tensor)"),
    "a100": (156e12, 312e12, 2039e9, "NVIDIA A100 SXM4 80GB datasheet (TF32, BF16 tensor)"),
    "h100": (
        494.5e12,
        989.5e12,
        3350e9,
        "NVIDIA H100 SXM5 datasheet (TF32, BF16 tensor; sparsity figures halved)",
    ),
    "h200": (
        494.5e12,
        989.5e12,
        4800e9,
        "NVIDIA H200 SXM datasheet (TF32, BF16 tensor; sparsity figures halved)",
    ),
    "b200": (
        1125e12,
        2250e12,
        8000e9,
        "NVIDIA HGX B200 datasheet (8-GPU figures / 8; sparsity figures halved)",
    ),
}

# (bf16 MXU FLOP/s per chip, HBM bytes/s per chip, source). f32 dots run as bf16 MXU passes at
# JAX's default precision, so one figure serves both.
TPU_SPECS: dict[str, tuple[float, float, str]] = {
    "v4": (275e12, 1200e9, "Google Cloud TPU v4 documentation (per chip)"),
    "v5e": (197e12, 819e9, "Google Cloud TPU v5e documentation (per chip)"),
    "v5p": (459e12, 2765e9, "Google Cloud TPU v5p documentation (per chip)"),
    "v6e": (918e12, 1640e9, "Google Cloud TPU v6e (Trillium) documentation (per chip)"),
}


def gpu_generation(kind: str) -> str | None:
    """``h100`` for ``NVIDIA H100 80GB HBM3`` (None for a GPU not in :data:`GPU_SPECS`)."""
    lowered = kind.lower()
    return next((name for name in GPU_SPECS if name in lowered), None)


def tpu_generation(kind: str) -> str | None:
    """``v5e`` for ``TPU v5 lite`` / ``v5e:2x2``; ``v5p`` for ``TPU v5`` / ``TPU v5p``."""
    lowered = kind.lower().split(":", 1)[0]
    m = re.search(r"v(\d+)\s*(lite|e|p)?", lowered)
    if m is None:
        return None
    gen, suffix = m.group(1), m.group(2)
    name = f"v{gen}" + ("e" if suffix in ("lite", "e") else "p" if gen == "5" else "")
    if gen == "6":
        name = "v6e"
    return name if name in TPU_SPECS else None


def spec_peaks(platform_name: str, kind: str, dtype: str = "f32") -> Peaks | None:
    """Datasheet peaks of a GPU or TPU (``kind``: device kind or nbcompile target name)."""
    if platform_name in ("gpu", "cuda", "rocm"):
        gen = gpu_generation(kind)
        if gen is None:
            return None
        f32, bf16, bw, source = GPU_SPECS[gen]
        flops = bf16 if dtype in ("bf16", "f16") else f32
        label = "BF16/FP16 tensor" if dtype in ("bf16", "f16") else "f32 dot (TF32 on A100+)"
        return Peaks(
            gen.upper(),
            Peak(flops, "spec", f"{label}: {source}"),
            Peak(bw, "spec", f"HBM: {source}"),
            dtype,
        )
    if platform_name == "tpu":
        gen = tpu_generation(kind)
        if gen is None:
            return None
        flops, bw, source = TPU_SPECS[gen]
        return Peaks(
            f"TPU {gen}",
            Peak(flops, "spec", f"bf16 MXU: {source}"),
            Peak(bw, "spec", f"HBM: {source}"),
            dtype,
        )
    return None


# --- CPU: measured once per machine --------------------------------------------------------
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:  # not Linux
        pass
    return platform.processor() or platform.machine() or "cpu"


def _cache_file() -> Path | None:
    """The cache file, in a folder only this user can write (``nbcompile._dirs``); None if
    there is none (the peaks are then measured in each process)."""
    root = _dirs.configured("NBCOMPILE_CACHE_DIR", "nbcompile")
    folder = _dirs.private_folder(None if root is None else root / "peaks", "the CPU peaks cache")
    if folder is None:
        return None
    cores = os.cpu_count() or 1
    key = re.sub(r"[^A-Za-z0-9]+", "-", f"{_cpu_model()}-{cores}cores").strip("-")[:120]
    return folder / f"{key}.json"


def _best_seconds(fn: Any, args: tuple[Any, ...], budget: float, feed_back: bool) -> tuple:
    """A near-best call time of ``fn`` over about ``budget`` seconds, and the number of calls.

    A peak is what the machine can do, and on a shared machine most calls lose time to other
    processes, so this is the fastest tenth's slowest call (the fastest of fewer than 10): close
    to the best, without trusting one lucky outlier."""
    import jax

    times: list[float] = []
    deadline = time.perf_counter() + budget
    while len(times) < 3 or (time.perf_counter() < deadline and len(times) < 200):
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
        if feed_back:  # donated input: the output is the next call's buffer (no page faults)
            args = (out,)
    times.sort()
    return times[len(times) // 10], len(times)


def _measure_cpu() -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    start = time.perf_counter()
    cpu = jax.devices("cpu")[0]
    n = 1024
    a = jax.device_put(jnp.full((n, n), 0.5, jnp.float32), cpu)
    matmul = jax.jit(lambda x, y: x @ y).lower(a, a).compile()
    jax.block_until_ready(matmul(a, a))
    seconds, matmuls = _best_seconds(matmul, (a, a), 0.5, feed_back=False)
    flops = 2.0 * n**3 / seconds
    m = _stream_elements()  # f32 elements: well past the caches
    x = jax.device_put(jnp.ones((m,), jnp.float32), cpu)
    stream = jax.jit(lambda v: v * 0.999 + 0.001, donate_argnums=0).lower(x).compile()
    x = jax.block_until_ready(stream(x))
    seconds, streams = _best_seconds(stream, (x,), 0.3, feed_back=True)
    bw = 2.0 * 4 * m / seconds
    return {
        "version": _VERSION,
        "cpu": _cpu_model(),
        "cores": os.cpu_count() or 1,
        "flops_per_s": flops,
        "bytes_per_s": bw,
        "matmul_calls": matmuls,
        "stream_calls": streams,
        "stream_bytes": 4 * m,
        "load": _load(),
        "seconds": time.perf_counter() - start,
        "jax": jax.__version__,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _largest_cache() -> int:
    """Bytes of the largest data cache Linux reports for CPU 0 (0 where none is reported)."""
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    sizes = [0]
    for index in root.glob("index*") if root.is_dir() else ():
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            size = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:], 1)
        digits = size.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * unit)
    return max(sizes)


def _stream_elements() -> int:
    """f32 elements of the streaming array: 64 MiB, or twice the largest cache (up to 1 GiB)."""
    return max(1 << 24, min(1 << 28, 2 * _largest_cache() // 4))


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:  # not available on this platform
        return None


def _as_peaks(data: dict[str, Any], cached: bool) -> Peaks:
    when = f"{'cached, ' if cached else ''}measured {data['measured_at']}"
    load = data.get("load")
    if isinstance(load, int | float) and load > 0.5 * data["cores"]:
        when += f", machine load {load:.1f}: may be low"
    return Peaks(
        f"CPU {data['cpu']} ({data['cores']} cores)",
        Peak(
            float(data["flops_per_s"]),
            "measured",
            f"1024³ f32 matmul through XLA, fastest tenth of {data.get('matmul_calls')} calls ({when})",
        ),
        Peak(
            float(data["bytes_per_s"]),
            "measured",
            f"{data.get('stream_bytes', 1 << 26) / 2**20:.0f} MiB streaming x*a+b through XLA, "
            f"read+write, fastest tenth of "
            f"{data.get('stream_calls')} calls ({when})",
        ),
        "f32",
    )


def _read_cache(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):  # absent or unreadable: measure again
        return None
    ok = (
        isinstance(data, dict)
        and data.get("version") == _VERSION
        and all(
            isinstance(data.get(k), int | float) and data[k] > 0
            for k in ("flops_per_s", "bytes_per_s")
        )
    )
    return data if ok else None


def cpu_peaks(refresh: bool = False) -> tuple[Peaks, dict[str, Any]]:
    """This CPU's measured peaks (cached per machine) and the raw record (``seconds`` it took
    when measured, ``cached``: whether it came from the cache file)."""
    path = _cache_file()
    data = None if refresh or path is None else _read_cache(path)
    if data is not None:
        return _as_peaks(data, cached=True), {**data, "cached": True, "path": str(path)}
    data = _measure_cpu()
    try:
        if path is not None:
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(data, indent=1))
            tmp.replace(path)
    except OSError:  # a read-only home: the figures are still good for this session
        pass
    where = None if path is None else str(path)
    return _as_peaks(data, cached=False), {**data, "cached": False, "path": where}
