"""Machine peaks for the roofline: measured on this CPU, from vendor datasheets for GPUs/TPUs.

* **CPU** (``source="measured"``): short micro-benchmarks through XLA, once per machine —
  square f32 matmuls (256, 512 and 1024 wide: the fastest counts) for FLOP/s, and an in-place streaming ``x * a + b`` for bytes/s
  (read + write): over an array past the caches (256 MiB, or four times the largest cache the
  CPU reports where that is more, up to 1 GiB: some machines report a 480 MiB L3, and a
  virtual machine can sit on more cache than it reports), which is the
  roof's bandwidth (``Peaks.bytes_per_s``, the ridge's), and over an array half the size of
  each cache level, which bounds a kernel whose data fits that cache (``Peaks.bandwidths``,
  ``Peaks.bandwidth_for``) — and, past the largest reported cache, levels of twice, four
  times... its size up to the stream's, each measured over half its size (a virtual machine's
  unreported cache). Each figure is the fastest of the calls made in a fixed time
  budget (about two seconds in all, with the compiles). Cached as JSON under the user cache
  folder (``$NBCOMPILE_CACHE_DIR``, else ``$XDG_CACHE_HOME/nbcompile``, else
  ``~/.cache/nbcompile``; only a folder only this user can write, see ``nbcompile._dirs``) keyed
  by CPU model and core count.

  **The peaks are upper bounds.** A peak is what the machine can do; a measurement on a busy
  machine is low. So a measurement never lowers a cached peak: ``refresh=True`` measures again
  and keeps, figure by figure, the higher of the two (delete the cache file to start over).
  When a measured kernel beats its roof, :func:`upper_bound` measures again (the roof may have
  been measured on a busier machine) and, if the kernel still beats it, refuses the roof: a
  roof a kernel beats is not one (the profile then says so and has no roofline).
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

# 2: the stream is sized from the caches; 3: the bandwidth per cache level, peaks merged by
# their maximum; 4: the FLOP/s of the fastest of three matmul sizes; 5: on this process's own
# CPU device (in a multi-process JAX, devices('cpu')[0] can be another process's: nothing
# ran); 6: the fastest call, not the fastest tenth's slowest; 7: the stream over 256 MiB or
# four times the largest reported cache (a 2-core VM reporting a 32 MiB L3 read 148 GB/s at
# 64 MiB on a quiet day, 50 GB/s from 256 MiB on), and levels past the reported caches. Bump
# when the measurement changes: old cache files are then measured again.
_VERSION = 7
#: a rate this much above its roof is the noise of two measurements, not a roof beaten
TOLERANCE = 1.05
#: measurements (the highest kept) before a roof a kernel beats is refused
REMEASURE = 3
#: seconds after a refusal during which a kernel that beat the peaks then, beating them again,
#: has them refused without measuring again (the three measurements just made are this
#: machine's state; each costs seconds)
REFUSED_FOR = 600.0
#: the last refusal in this process: (the peaks' figures, time.monotonic(), the (name,
#: working-set bytes) of each kernel that still beat them, in every refusal of these peaks), or
#: None
_refused: tuple[tuple[float, ...], float, frozenset[tuple[str, float | None]]] | None = None
#: square f32 matmuls measured for the FLOP/s peak (the fastest counts)
MATMUL_SIZES = (256, 512, 1024)


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
    """The roof: peak FLOP/s and bytes/s of one device (``dtype``: what the FLOP/s is for).

    ``bytes_per_s`` is the bandwidth from memory (past the caches; the ridge's).
    ``bandwidths`` (measured CPUs only): ``(cache bytes, bytes/s)`` per cache level, smallest
    first: the capacity of the level (all cores' when each core has its own) and the bandwidth
    of the same streaming kernel over an array that fits it; see :meth:`bandwidth_for`."""

    device: str
    flops_per_s: Peak
    bytes_per_s: Peak
    dtype: str = "f32"
    bandwidths: tuple[tuple[int, float], ...] = ()

    @property
    def ridge(self) -> float:
        """Arithmetic intensity (FLOP/byte) above which a kernel is compute-bound."""
        return self.flops_per_s.value / self.bytes_per_s.value

    def bandwidth_for(self, nbytes: float | None) -> float:
        """The bytes/s a kernel moving ``nbytes`` (its working set) can reach at most: the
        fastest bandwidth measured for a cache level that can hold it (a kernel larger than
        every cache streams from memory: ``bytes_per_s``, also without per-cache figures or
        ``nbytes``)."""
        fits = [bw for size, bw in self.bandwidths if nbytes is not None and nbytes <= size]
        return max([self.bytes_per_s.value, *fits])

    def ridge_for(self, nbytes: float | None) -> float:
        """The ridge of a kernel moving ``nbytes``: peak FLOP/s over :meth:`bandwidth_for`."""
        return self.flops_per_s.value / self.bandwidth_for(nbytes)

    def roof(self, intensity: float, nbytes: float | None = None) -> float:
        """Attainable FLOP/s at ``intensity``: min(peak FLOP/s, intensity × bytes/s), the
        bytes/s that of a working set of ``nbytes`` when given (:meth:`bandwidth_for`)."""
        return min(self.flops_per_s.value, intensity * self.bandwidth_for(nbytes))

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "dtype": self.dtype,
            "ridge": self.ridge,
            "flops_per_s": self.flops_per_s.to_json(),
            "bytes_per_s": self.bytes_per_s.to_json(),
            "bandwidths": [list(b) for b in self.bandwidths],
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
    return folder / f"{key}.v{_VERSION}.json"  # per method: versions never overwrite each other


def _best_seconds(fn: Any, args: tuple[Any, ...], budget: float, feed_back: bool) -> tuple:
    """The fastest call time of ``fn`` over about ``budget`` seconds, and the number of calls.

    A peak is what the machine can do, and on a shared machine most calls lose time to other
    processes; no call runs faster than the machine can, so the fastest one is the bound (the
    fastest tenth's slowest call, used before, was beaten by a model's own best calls)."""
    import jax

    times: list[float] = []
    deadline = time.perf_counter() + budget
    while len(times) < 3 or (time.perf_counter() < deadline and len(times) < 200):
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
        if feed_back:  # donated input: the output is the next call's buffer (no page faults)
            args = (out, *args[1:])
    return min(times), len(times)


def stream_bandwidth(nbytes: int, budget: float = 0.3) -> tuple[float, int]:
    """Read + write bytes/s of XLA's in-place ``x * a + b`` over an f32 array of ``nbytes``,
    repeated in a loop inside one call so each call moves at least 64 MiB (a call's fixed cost
    is then small), with the array donated and fed back (no fresh buffer, no page faults); the
    fastest of the calls in ``budget`` seconds, and the number of calls."""
    import jax
    import jax.numpy as jnp

    n = max(1, nbytes // 4)
    passes = max(1, (1 << 26) // (8 * n))
    loop = jax.jit(
        lambda v: jax.lax.fori_loop(0, passes, lambda i, a: a * 0.999 + 0.001, v),
        donate_argnums=0,
    )
    cpu = jax.local_devices(backend="cpu")[0]
    x = jax.device_put(jnp.ones((n,), jnp.float32), cpu)
    x = jax.block_until_ready(loop(x))  # compiles; the first touch of the pages
    seconds, calls = _best_seconds(loop, (x,), budget, feed_back=True)
    return 2.0 * 4 * n * passes / seconds, calls


def _measure_cpu(patience: float = 1.0) -> dict[str, Any]:
    """One measurement of every figure; ``patience`` scales each figure's time budget (a
    re-measurement waits longer for a quiet moment on a busy machine)."""
    import jax
    import jax.numpy as jnp

    start = time.perf_counter()
    cpu = jax.local_devices(backend="cpu")[0]
    # the fastest of three sizes: a matmul whose operands fit the caches can beat a larger one
    # (a 1024³ one alone was beaten by a model's smaller matmuls)
    flops, matmuls = 0.0, 0
    for n in MATMUL_SIZES:
        a = jax.device_put(jnp.full((n, n), 0.5, jnp.float32), cpu)
        matmul = jax.jit(lambda x, y: x @ y).lower(a, a).compile()
        jax.block_until_ready(matmul(a, a))
        seconds, calls = _best_seconds(matmul, (a, a), 0.25 * patience, feed_back=False)
        if float(matmul(a, a)[0, 0]) != 0.25 * n:  # it ran here, and ran right
            raise RuntimeError(f"the {n}³ calibration matmul gave a wrong result")
        flops, matmuls = max(flops, 2.0 * n**3 / seconds), matmuls + calls
    stream = 4 * _stream_elements()  # bytes: well past the caches
    bw, streams = stream_bandwidth(stream, 0.3 * patience)
    # per cache level: [capacity, bytes/s over an array of half of one core's share]
    levels = _caches()
    bandwidths = [[cap, stream_bandwidth(size // 2, 0.15 * patience)[0]] for cap, size in levels]
    # past the reported caches, doubling up to the stream's size: a virtual machine can sit on
    # more cache than it reports (this 2-core VM reports 32 MiB and streams 148 GB/s over 64 MiB
    # on a quiet day), so a kernel there is bounded by what an array half its level streams at
    cap = 2 * max((c for c, _ in levels), default=stream)
    while cap <= stream:
        bandwidths.append([cap, stream_bandwidth(cap // 2, 0.05 * patience)[0]])
        cap *= 2
    return {
        "version": _VERSION,
        "cpu": _cpu_model(),
        "cores": os.cpu_count() or 1,
        "flops_per_s": flops,
        "bytes_per_s": bw,
        "bandwidths": bandwidths,
        "matmul_calls": matmuls,
        "stream_calls": streams,
        "stream_bytes": stream,
        "load": _load(),
        "seconds": time.perf_counter() - start,
        "jax": jax.__version__,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _caches() -> list[tuple[int, int]]:
    """``(capacity, size)`` of each data cache level Linux reports for CPU 0, smallest first:
    ``size`` one core's cache, ``capacity`` all cores' (a level each core has its own of holds
    ``cores`` times as much data spread over the cores)."""
    cores = os.cpu_count() or 1
    levels = {size: size * max(1, cores // max(1, shared)) for size, shared in _data_caches()}
    return sorted((cap, size) for size, cap in levels.items())


def _data_caches() -> list[tuple[int, int]]:
    """``(bytes, CPUs sharing it)`` of each data (or unified) cache Linux reports for CPU 0
    (empty where none)."""
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    sizes = []
    for index in root.glob("index*") if root.is_dir() else ():
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            size = (index / "size").read_text().strip().upper()
            shared = _count_cpus((index / "shared_cpu_list").read_text())
        except OSError:
            continue
        unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:], 1)
        digits = size.rstrip("KMG")
        if digits.isdigit():
            sizes.append((int(digits) * unit, shared))
    return sizes


def _count_cpus(cpu_list: str) -> int:
    """CPUs in a Linux CPU list such as ``0-3,8``."""
    count = 0
    for part in cpu_list.strip().split(","):
        first, _, last = part.partition("-")
        if first.isdigit():
            count += int(last) - int(first) + 1 if last.isdigit() else 1
    return max(1, count)


def _largest_cache() -> int:
    """Bytes of the largest data cache Linux reports for CPU 0 (0 where none is reported)."""
    return max([0, *(size for size, _ in _data_caches())])


def _stream_elements() -> int:
    """f32 elements of the streaming array: 256 MiB, or four times the largest cache the CPU
    reports (up to 1 GiB). A virtual machine may sit on more cache than it reports: a 2-core
    VM reporting a 32 MiB L3 read 148 GB/s over 64 MiB on a quiet day, ~50 GB/s from 256 MiB."""
    return max(1 << 26, min(1 << 28, _largest_cache()))


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:  # not available on this platform
        return None


def _when(data: dict[str, Any], figure: str, cached: bool) -> str:
    at = data.get(f"{figure}_at", data["measured_at"])
    load = data.get(f"{figure}_load", data.get("load"))
    when = f"{'cached, ' if cached else ''}measured {at}"
    if isinstance(load, int | float) and load > 0.5 * data["cores"]:
        when += f", machine load {load:.1f}: may be low"
    n = data.get("measurements", 1)
    return when + (f"; the highest of {n} measurements" if n > 1 else "")


def _as_peaks(data: dict[str, Any], cached: bool) -> Peaks:
    levels = tuple((int(size), float(bw)) for size, bw in data.get("bandwidths", []) if size and bw)
    return Peaks(
        f"CPU {data['cpu']} ({data['cores']} cores)",
        Peak(
            float(data["flops_per_s"]),
            "measured",
            f"f32 matmuls through XLA (256³, 512³, 1024³), the fastest call; "
            f"{data.get('matmul_calls')} calls "
            f"({_when(data, 'flops', cached)})",
        ),
        Peak(
            float(data["bytes_per_s"]),
            "measured",
            f"{data.get('stream_bytes', 1 << 26) / 2**20:.0f} MiB streaming x*a+b through XLA, "
            f"read+write, fastest of "
            f"{data.get('stream_calls')} calls ({_when(data, 'bytes', cached)})",
        ),
        "f32",
        tuple(sorted(levels)),
    )


def _merge(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """``new``, keeping figure by figure the higher of the two measurements (a peak is what
    the machine can do: a measurement on a busier machine does not lower it)."""
    out = dict(new)
    for figure, key, calls in (
        ("flops", "flops_per_s", "matmul_calls"),
        ("bytes", "bytes_per_s", "stream_calls"),
    ):
        out.setdefault(f"{figure}_at", new["measured_at"])
        out.setdefault(f"{figure}_load", new.get("load"))
        same = old is not None and (
            figure == "flops" or old.get("stream_bytes") == new.get("stream_bytes")
        )
        if same and old[key] > new[key]:
            out[key], out[calls] = old[key], old.get(calls)
            out[f"{figure}_at"] = old.get(f"{figure}_at", old["measured_at"])
            out[f"{figure}_load"] = old.get(f"{figure}_load", old.get("load"))
    best = {int(size): float(bw) for size, bw in new.get("bandwidths", [])}
    # the same cache levels only (a cache file of another machine is keyed apart anyway)
    for size, bw in (old or {}).get("bandwidths", []):
        if int(size) in best:
            best[int(size)] = max(best[int(size)], float(bw))
    out["bandwidths"] = [[size, bw] for size, bw in sorted(best.items())]
    out["measurements"] = (old or {}).get("measurements", 1 if old else 0) + 1
    return out


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


def cpu_peaks(refresh: bool = False, patience: float = 1.0) -> tuple[Peaks, dict[str, Any]]:
    """This CPU's measured peaks (cached per machine) and the raw record (``seconds`` it took
    when measured, ``cached``: whether it came from the cache file). ``refresh=True`` measures
    again and keeps, figure by figure, the higher of the new and the cached measurement;
    ``patience`` scales the time each figure is measured for (the fastest call counts)."""
    path = _cache_file()
    cached = None if path is None else _read_cache(path)
    if cached is not None and not refresh:
        return _as_peaks(cached, cached=True), {**cached, "cached": True, "path": str(path)}
    data = _merge(cached, _measure_cpu(patience))
    try:
        if path is not None:
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(data, indent=1))
            tmp.replace(path)
    except OSError:  # a read-only home: the figures are still good for this session
        pass
    where = None if path is None else str(path)
    return _as_peaks(data, cached=False), {**data, "cached": False, "path": where}


def beaten(
    peaks: Peaks, flops_per_s: float = 0.0, bytes_per_s: float = 0.0, nbytes: float | None = None
) -> str | None:
    """What of ``peaks`` a kernel running at these rates beats (beyond :data:`TOLERANCE`), in
    words, or None: FLOP/s above the peak, or bytes/s above the bandwidth of its working set
    ``nbytes`` (:meth:`Peaks.bandwidth_for`)."""
    if flops_per_s > TOLERANCE * peaks.flops_per_s.value:
        return f"{flops_per_s / peaks.flops_per_s.value:.2f}× the peak FLOP/s"
    roof = peaks.bandwidth_for(nbytes)
    if bytes_per_s > TOLERANCE * roof:
        return f"{bytes_per_s / roof:.2f}× the bandwidth of its working set"
    return None


def _figures(peaks: Peaks) -> tuple[float, ...]:
    return (peaks.flops_per_s.value, peaks.bytes_per_s.value, *(bw for _, bw in peaks.bandwidths))


def _beating(peaks: Peaks, rates: list[tuple[str, float, float, float | None]]) -> frozenset:
    """(name, working-set bytes) of each kernel of ``rates`` that beats ``peaks``."""
    return frozenset((n, s) for n, f, b, s in rates if beaten(peaks, f, b, s))


def upper_bound(
    peaks: Peaks, rates: list[tuple[str, float, float, float | None]]
) -> tuple[Peaks | None, list[str]]:
    """Check that measured ``peaks`` bound every kernel's ``(name, flops/s, bytes/s,
    working-set bytes)``; when one beats them, measure again (keeping the higher figures) and
    check again, up to :data:`REMEASURE` times. Returns the peaks that bound every kernel — or
    None, refused, when a kernel still beats them — and notes saying what happened. Peaks
    refused in this process less than :data:`REFUSED_FOR` seconds ago, beaten again by a kernel
    that beat them then, are refused again at once (a ``--profile`` re-run does not wait for
    three more measurements). Datasheet peaks are
    returned as they are (a kernel cannot be measured above them here)."""
    if peaks.flops_per_s.source != "measured":
        return peaks, []
    first = next(((n, w) for n, f, b, s in rates if (w := beaten(peaks, f, b, s))), None)
    if first is None:
        return peaks, []
    global _refused
    if _refused is not None and _refused[0] == _figures(peaks):
        ago = time.monotonic() - _refused[1]
        # a kernel that beat these peaks just now, after measuring again, beats them again (a
        # re-run of the same program): that alone refuses them, and measuring again just
        # failed to raise them; peaks beaten only by other kernels are measured again
        known = next((k for k in _beating(peaks, rates) if k in _refused[2]), None)
        if ago < REFUSED_FOR and known is not None:
            return None, [
                f"refused: {known[0]} ran above these peaks again; they were measured again "
                f"{REMEASURE} times {ago:.0f} s ago in this session and did not bound it "
                f"then, so they are no upper bound on this machine now; no roofline "
                f"(measured again after {REFUSED_FOR / 60:.0f} min)"
            ]
    notes = [f"{first[0]} ran at {first[1]} measured before: the peaks were measured again"]
    # a busy moment measures low: a few tries, the highest kept, each twice as long as the last
    # (more chances of a quiet moment: the fastest call counts)
    for attempt in range(REMEASURE):
        peaks = cpu_peaks(refresh=True, patience=2.0**attempt)[0]
        still = next(((n, w) for n, f, b, s in rates if (w := beaten(peaks, f, b, s))), None)
        if still is None:
            return peaks, notes
    beating = _beating(peaks, rates)
    if _refused is not None and _refused[0] == _figures(peaks):  # the same peaks: all of them
        beating |= _refused[2]
    _refused = (_figures(peaks), time.monotonic(), beating)
    notes.append(
        f"refused: {still[0]} still ran at {still[1]} after measuring again {REMEASURE} times, so the measured "
        "peaks are no upper bound on this machine now; no roofline"
    )
    return None, notes
