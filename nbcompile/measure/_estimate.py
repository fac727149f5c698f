"""The profile of a program that cannot run here (deviceless TPU topology, GPU target): an
estimate from XLA's cost model and the target's datasheet peaks, labelled ``estimate``.

Each kernel's time is its roofline time, ``max(flops / peak FLOP/s, bytes / peak bytes/s)``:
the least time the hardware needs for that work. The call's time is XLA's own
``optimal_seconds`` for the whole program where the backend reports one (TPU), else the sum of
the kernels' estimates. Loop bodies count once (their trip count is not known statically).
"""

from __future__ import annotations

from typing import Any

from ..errors import TargetError
from ..units import format_seconds
from ._kernels import KernelInfo
from ._peaks import spec_peaks
from ._result import KernelTime, Profile, dtype_of, place_on_roof, spread

__all__ = ["estimate"]


def _kind(c: Any, label: str) -> str:
    target = getattr(c, "target", None)
    for attr in ("topology", "gpu", "gpu_target"):
        value = getattr(target, attr, None)
        if isinstance(value, str) and value:
            return value
    return label


def estimate(c: Any, infos: dict[str, KernelInfo], label: str) -> Profile:
    """The estimated profile of ``c`` on its (absent) target."""
    kind = _kind(c, label)
    peaks = spec_peaks(c.backend, kind, dtype_of(c))
    if peaks is None:
        raise TargetError(
            f"cannot estimate the time on {label}: no datasheet peaks for {kind!r}",
            hint="estimates cover GPUs V100/A100/H100/H200/B200 and TPUs v4/v5e/v5p/v6e",
        )
    notes = [
        f"{label} is not here: times are estimates from XLA's cost model and "
        f"{peaks.device} datasheet peaks, not measurements"
    ]
    rows = []
    for info in infos.values():
        if info.container or info.flops is None or info.bytes is None:
            continue
        seconds = max(info.flops / peaks.flops_per_s.value, info.bytes / peaks.bytes_per_s.value)
        if seconds <= 0:
            continue
        row = KernelTime(
            name=info.name,
            opcode=info.opcode,
            seconds=seconds,
            share=0.0,
            busy_seconds=None,
            count=1,
            flops=info.flops,
            bytes=info.bytes,
            cost_source=info.cost_source,
            lines=list(info.locations),
            cell_lines=list(info.cell_lines),
            modules=list(info.modules),
        )
        place_on_roof(row, peaks, measured=False)
        rows.append(row)
    total = sum(r.seconds for r in rows)
    optimal = (c.cost or {}).get("optimal_seconds")
    if isinstance(optimal, int | float) and optimal > 0:
        step, method = float(optimal), "XLA cost model optimal_seconds; kernels by roofline"
        notes.append(
            f"kernel roofline times add up to {format_seconds(total)}; XLA's "
            f"optimal_seconds for the program is {format_seconds(step)}"
        )
    else:
        step, method = total, "roofline: XLA flops and bytes over datasheet peaks"
    for row in rows:
        row.share = row.seconds / step if step else 0.0
    rows.sort(key=lambda r: -r.seconds)
    if any(i.container for i in infos.values()):
        notes.append("loop bodies are counted once: their trip counts are not known statically")
    by_line, by_cell, by_module, no_line = spread(rows, infos)
    return Profile(
        source="estimate",
        step_seconds=step,
        kernels=rows,
        by_line=by_line,
        by_cell_line=by_cell,
        by_module=by_module,
        coverage=None,
        peaks=peaks,
        no_line_seconds=no_line,
        where=label,
        method=method,
        notes=notes,
    )
