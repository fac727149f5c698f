"""The profile's data: :class:`Profile` (one call's time per kernel, line and module) and its
:class:`KernelTime` rows, plus the pure helpers that build them (medians, roofline, per-line
spread). Measuring is in :mod:`.profile`, the deviceless estimate in :mod:`._estimate`.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import jax

from ..units import format_bytes, format_seconds
from ._kernels import KernelInfo, location_json, location_label
from ._peaks import Peaks

__all__ = [
    "KernelTime",
    "Profile",
    "dtype_of",
    "make_row",
    "median",
    "place_on_roof",
    "quartiles",
    "spread",
]


@dataclass
class KernelTime:
    """One kernel's row. ``seconds``: median wall-clock time per call given to it (instants
    shared with concurrently running kernels are split evenly); ``busy_seconds``: median time
    it was running (its own span; the achieved rates use it); ``q25`` / ``q75`` / ``mean_seconds``:
    spread and mean of ``seconds`` over the calls (means add up across kernels, medians need
    not on a busy machine); ``count``: executions per call;
    ``flops`` / ``bytes``: XLA's figures per call; ``roof_fraction``: achieved FLOP/s over the
    roof at this kernel's intensity (bytes/s over peak for a kernel with no flops)."""

    name: str
    opcode: str
    seconds: float
    share: float
    busy_seconds: float | None
    count: float
    q25: float | None = None
    q75: float | None = None
    mean_seconds: float | None = None
    flops: float | None = None
    bytes: float | None = None
    cost_source: str | None = None
    intensity: float | None = None
    achieved_flops_per_s: float | None = None
    achieved_bytes_per_s: float | None = None
    bound: str | None = None
    roof_fraction: float | None = None
    lines: list[Any] = field(default_factory=list)
    cell_lines: list[int] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["lines"] = [location_json(loc) for loc in self.lines]
        out["cell_lines"] = list(self.cell_lines)
        out["modules"] = list(self.modules)
        return out


@dataclass
class Profile:
    """Measured (or estimated) time of one call, per kernel / location / module.

    ``step_seconds``: median wall-clock time of one call. It splits exactly (as differences of
    medians over the same calls, each >= 0) into ``dispatch_seconds`` (outside execution: the
    Python call, argument handling, waiting for the result), ``unattributed_seconds`` (execution
    with no kernel running: thread hand-offs, executor bookkeeping) and
    ``kernel_union_seconds`` (some kernel running), which is the sum of the per-kernel medians
    (``kernel_seconds``) give or take ``spread_seconds``. ``coverage``: median fraction of
    execution time on named kernels. ``by_line`` is keyed like ``Fusion.locations``.
    """

    source: str
    step_seconds: float
    kernels: list[KernelTime]
    by_line: dict[Any, float]
    by_cell_line: dict[int, float]
    by_module: dict[str, float]
    coverage: float | None
    peaks: Peaks | None
    calls: int = 0
    warmup: int = 0
    step_q25: float | None = None
    step_q75: float | None = None
    execution_seconds: float | None = None
    unattributed_seconds: float | None = None
    dispatch_seconds: float | None = None
    overlap_seconds: float | None = None
    kernel_union_seconds: float | None = None
    no_line_seconds: float = 0.0
    where: str = ""
    method: str = ""
    notes: list[str] = field(default_factory=list)
    by_function: dict[str, float] = field(default_factory=dict)  # call path -> seconds
    #: per loop of the program (``c.loops``' order): seconds per iteration (``_loops.LoopTime``)
    loops: list[Any] = field(default_factory=list)
    #: with several JAX processes: every process's profile side by side
    #: (:class:`nbcompile.processes.ProcessProfiles`); None with one process
    processes: Any = None

    @property
    def kernel_seconds(self) -> float:
        """Sum of the per-kernel medians."""
        return sum(k.seconds for k in self.kernels)

    @property
    def spread_seconds(self) -> float | None:
        """Median call's kernel time minus the sum of per-kernel medians (noise between calls).
        With it the call adds up exactly: ``step_seconds = dispatch_seconds +
        unattributed_seconds + spread_seconds + kernel_seconds``."""
        if self.kernel_union_seconds is None:
            return None
        return self.kernel_union_seconds - self.kernel_seconds

    @property
    def gap(self) -> str | None:
        """Why the per-kernel medians do not add up to the call (None within 15 %)."""
        if self.step_seconds <= 0 or self.source != "measured":
            return None
        missing = self.step_seconds - self.kernel_seconds
        if abs(missing) <= 0.15 * self.step_seconds:
            return None
        parts = []
        if self.dispatch_seconds:
            parts.append(
                f"{format_seconds(self.dispatch_seconds)} outside execution (Python "
                "call, argument handling, waiting for the result)"
            )
        if self.unattributed_seconds:
            parts.append(
                f"{format_seconds(self.unattributed_seconds)} inside execution between "
                "kernels (thread hand-offs, executor bookkeeping)"
            )
        spread = self.spread_seconds
        if spread is not None and abs(spread) > 0.02 * self.step_seconds:
            more = "less" if spread > 0 else "more"
            parts.append(
                f"{format_seconds(abs(spread))} because per-kernel medians add up to "
                f"{more} than the median call's kernel time "
                f"({format_seconds(self.kernel_union_seconds)}): each kernel's slow calls "
                "fall on different calls (a busy machine)"
            )
        return (
            f"the kernels' medians add up to {format_seconds(self.kernel_seconds)} of a "
            f"{format_seconds(self.step_seconds)} call: " + "; ".join(parts or ["noise"])
        )

    def kernel(self, name: str) -> KernelTime:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(f"no kernel {name!r} in this profile")

    def to_json(self) -> dict[str, Any]:
        cost = "XLA" if self.source == "measured" else "XLA cost model"
        return {
            "source": self.source,
            "method": self.method,
            "where": self.where,
            "calls": self.calls,
            "warmup": self.warmup,
            "step_seconds": self.step_seconds,
            "step_q25": self.step_q25,
            "step_q75": self.step_q75,
            "kernel_seconds": self.kernel_seconds,
            "execution_seconds": self.execution_seconds,
            "unattributed_seconds": self.unattributed_seconds,
            "dispatch_seconds": self.dispatch_seconds,
            "overlap_seconds": self.overlap_seconds,
            "kernel_union_seconds": self.kernel_union_seconds,
            "spread_seconds": self.spread_seconds,
            "no_line_seconds": self.no_line_seconds,
            "coverage": self.coverage,
            "gap": self.gap,
            "kernels": [k.to_json() for k in self.kernels],
            "by_line": [
                {
                    "location": location_json(loc),
                    "label": location_label(loc),
                    "seconds": s,
                    "share": s / self.step_seconds if self.step_seconds else None,
                }
                for loc, s in sorted(self.by_line.items(), key=lambda kv: -kv[1])
            ],
            "by_cell_line": {str(k): v for k, v in sorted(self.by_cell_line.items())},
            "by_module": dict(sorted(self.by_module.items(), key=lambda kv: -kv[1])),
            "by_function": dict(sorted(self.by_function.items(), key=lambda kv: -kv[1])),
            "loops": [t.to_json() for t in self.loops],
            "split": "by member-op cost (estimate from shapes), else evenly",
            "peaks": self.peaks.to_json() if self.peaks else None,
            "sources": {  # where each figure comes from
                "seconds": self.source,
                "flops": cost,
                "bytes": cost,
                "achieved": self.source if self.source == "measured" else None,
                "bound": f"{cost} intensity vs peaks",
                "peaks": {
                    "flops_per_s": self.peaks.flops_per_s.source,
                    "bytes_per_s": self.peaks.bytes_per_s.source,
                }
                if self.peaks
                else None,
            },
            "notes": list(self.notes),
        }

    def text(self, top: int = 10) -> str:
        if self.source == "measured":
            head = (
                f"measured over {self.calls} calls ({self.where}): "
                f"{format_seconds(self.step_seconds)} per call"
            )
            if self.step_q25 is not None and self.step_q75 is not None:
                head += f" (IQR {format_seconds(self.step_q25)}–{format_seconds(self.step_q75)})"
            if self.coverage is not None:
                head += f"; {self.coverage:.1%} of execution on {len(self.kernels)} kernels"
        else:
            head = f"estimate ({self.method}): {format_seconds(self.step_seconds)} per call"
        rows = [head, f"  {'time':>9} {'share':>6}  {'bound':<7} {'roof':>5}  kernel  (lines)"]
        for k in self.kernels[:top]:
            roof = f"{k.roof_fraction:.0%}" if k.roof_fraction is not None else "—"
            rows.append(
                f"  {format_seconds(k.seconds):>9} {k.share:>6.1%}  {k.bound or '—':<7}"
                f" {roof:>5}  {k.name}  ({_lines_label(k)})"
            )
        if len(self.kernels) > top:
            rest = sum(k.seconds for k in self.kernels[top:])
            rows.append(f"  {format_seconds(rest):>9} … {len(self.kernels) - top} more kernels")
        if self.source == "measured":
            rows.append(
                f"  unattributed {format_seconds(self.unattributed_seconds)} (between "
                f"kernels), dispatch {format_seconds(self.dispatch_seconds)}"
            )
        if self.gap:
            rows.append(f"  gap: {self.gap}")
        rows += [loop_line(t) for t in self.loops]
        if self.peaks:
            p = self.peaks
            rows.append(
                f"roofline: {p.device}: {format_flops(p.flops_per_s.value)} "
                f"({p.flops_per_s.source}), {format_bytes(p.bytes_per_s.value)}/s "
                f"({p.bytes_per_s.source})"
            )
        rows += [f"note: {n}" for n in self.notes]
        return "\n".join(rows)


def loop_line(t: Any) -> str:
    """``loop scan × 6 · line 6: 1.2 ms per call; per iteration 80 µs … (slowest: 3, 1.0 ms)``."""
    head = f"loop {t.loop.label}: "
    head += format_seconds(t.total_seconds) if t.total_seconds is not None else "—"
    head += " per call"
    if t.iterations:
        shown = ", ".join(format_seconds(s) for s in t.iterations[:8])
        more = ", …" if len(t.iterations) > 8 else ""
        slow = max(range(len(t.iterations)), key=t.iterations.__getitem__)
        head += (
            f"; per iteration {shown}{more} (slowest: iteration {slow}, "
            f"{format_seconds(t.iterations[slow])})"
        )
    if t.note:
        head += f" ({t.note})"
    return "  " + head


def format_flops(rate: float) -> str:
    """``106 GFLOP/s``."""
    for unit, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if rate >= scale:
            return f"{rate / scale:.3g} {unit}FLOP/s"
    return f"{rate:.3g} FLOP/s"


def _lines_label(k: KernelTime) -> str:
    if any(hasattr(loc, "label") for loc in k.lines):  # Location objects name cell or file
        return ", ".join(location_label(loc) for loc in k.lines[:3])
    if k.cell_lines:
        return "line " + ", ".join(str(n) for n in k.cell_lines[:4])
    if k.lines:
        return ", ".join(location_label(loc) for loc in k.lines[:3])
    return "no line"


# --- helpers -------------------------------------------------------------------------------
def median(values: Iterable[float]) -> float:
    vals = list(values)
    return statistics.median(vals) if vals else 0.0


def quartiles(values: list[float]) -> tuple[float | None, float | None]:
    """First and third quartile (inclusive method); the value itself for one sample."""
    if len(values) < 2:
        return (values[0], values[0]) if values else (None, None)
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def dtype_of(c: Any) -> str:
    """The floating dtype holding most of the arguments' bytes (picks the GPU peak)."""
    weight: dict[str, int] = {}
    for leaf in jax.tree.leaves(c.args):
        dtype, size = getattr(leaf, "dtype", None), getattr(leaf, "size", None)
        if dtype is not None and size is not None and "float" in str(dtype):
            name = "bf16" if str(dtype) in ("bfloat16", "float16") else "f32"
            weight[name] = weight.get(name, 0) + int(size) * getattr(dtype, "itemsize", 4)
    return max(weight, key=weight.get) if weight else "f32"


def place_on_roof(row: KernelTime, peaks: Peaks | None, measured: bool) -> None:
    """Fill ``row``'s intensity, achieved rates (measured rows only), bound and roof fraction."""
    f, b = row.flops, row.bytes
    if f is None or b is None or (f == 0 and b == 0):
        return
    row.intensity = f / b if b else None
    if measured and row.busy_seconds:
        row.achieved_flops_per_s = f / row.busy_seconds
        row.achieved_bytes_per_s = b / row.busy_seconds
    if peaks is None:
        return
    # a kernel whose data fits a cache is bounded by that cache's bandwidth (measured CPUs;
    # the ridge is then lower for it), else by the bandwidth from memory
    ridge = peaks.ridge_for(b)
    row.bound = "compute" if row.intensity is None or row.intensity >= ridge else "memory"
    if row.achieved_flops_per_s is None:
        return
    if f > 0 and row.intensity is not None:
        row.roof_fraction = row.achieved_flops_per_s / peaks.roof(row.intensity, b)
    elif row.achieved_bytes_per_s is not None:
        row.roof_fraction = row.achieved_bytes_per_s / peaks.bandwidth_for(b)


def spread(rows: list[KernelTime], infos: dict[str, KernelInfo]) -> tuple:
    """``(by_line, by_cell_line, by_module, no_line_seconds)``: each kernel's seconds shared
    among its locations (cell lines, modules) in proportion to its member ops' estimated cost
    (``analysis/shares.py``; evenly where the analysis has no shares); time on kernels with no
    location."""
    by_line: dict[Any, float] = {}
    by_cell: dict[int, float] = {}
    by_module: dict[str, float] = {}
    no_line = 0.0
    for row in rows:
        info = infos[row.name]
        if info.locations:
            _share(by_line, row.seconds, info.locations, info.shares, "lines")
        else:
            no_line += row.seconds
        _share(by_cell, row.seconds, info.cell_lines, info.shares, "cell_lines")
        _share(by_module, row.seconds, info.modules, info.shares, "modules")
    return by_line, by_cell, by_module, no_line


def by_function(rows: list[KernelTime], infos: dict[str, KernelInfo]) -> dict[str, float]:
    """Seconds per call path of the user's calls (``loss#1/block#3``), shared like
    :func:`spread`; kernels from no call of the user's are left out."""
    out: dict[str, float] = {}
    for row in rows:
        info = infos.get(row.name)
        if info is not None:
            _share(out, row.seconds, info.functions, info.shares, "functions")
    return out


def _share(table: dict[Any, float], amount: float, keys: list[Any], shares: Any, what: str) -> None:
    """Add ``amount`` to ``keys`` in ``table``: by the kernel's cost shares where they cover
    the keys, else evenly."""
    if not keys:
        return
    weights = getattr(shares, what, None) or {}
    covered = sum(weights.get(k, 0.0) for k in keys)
    for key in keys:
        part = weights.get(key, 0.0) / covered if covered > 0 else 1.0 / len(keys)
        table[key] = table.get(key, 0.0) + amount * part


def make_row(
    info: KernelInfo, seconds: list[float], busy: list[float], counts: list[int], step: float
) -> KernelTime:
    """A measured row from per-call samples (medians; flops and bytes times executions)."""
    med = median(seconds)
    count = median(counts)
    q25, q75 = quartiles(seconds)
    scale = count if count else 1.0
    return KernelTime(
        name=info.name,
        opcode=info.opcode,
        seconds=med,
        share=med / step if step else 0.0,
        busy_seconds=median(busy) if busy else None,
        count=count,
        q25=q25,
        q75=q75,
        mean_seconds=sum(seconds) / len(seconds) if seconds else None,
        flops=info.flops * scale if info.flops is not None else None,
        bytes=info.bytes * scale if info.bytes is not None else None,
        cost_source=info.cost_source,
        lines=list(info.locations),
        cell_lines=list(info.cell_lines),
        modules=list(info.modules),
    )
