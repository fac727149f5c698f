"""`make gpu-check`, memory part: nbcompile's memory map against what the GPU allocator saw.

For each model: compile for the GPU here from abstract arguments (so autotuning scratch is
freed before anything else is allocated), put the arguments on the device, call once, and read
``memory_stats()["peak_bytes_in_use"]``. The program's own share of that peak is
``peak - bytes_in_use_before_call + argument_bytes`` (the arguments are part of the map's peak),
valid when this call set the process's peak. It is compared with the map's live peak
(``peak_bytes``) and with XLA's allocation (``allocated_bytes``: arguments + outputs + temp),
which is what the allocator is actually asked for; within 10 % or the difference is explained.
Without a device that reports ``memory_stats()`` (the CPU) every row says so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["memory_rows", "memory_table"]


def _stats(device: Any) -> dict[str, int] | None:
    try:
        return device.memory_stats()
    except (RuntimeError, NotImplementedError):
        return None


def memory_rows(
    models: dict[str, tuple[Callable[..., Any], tuple[Any, ...]]],
) -> list[dict[str, Any]]:
    import jax

    from nbcompile.analysis.cost import normalise_memory
    from nbcompile.analysis.memory import memory_map_from_hlo

    rows = []
    device = jax.devices()[0]
    for name, (fn, args) in models.items():
        abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), args)
        compiled = jax.jit(fn).lower(*abstract).compile()
        m = memory_map_from_hlo(
            compiled.as_text(),
            platform=jax.default_backend(),
            xla_memory=normalise_memory(compiled.memory_analysis()) or {},
        )
        row: dict[str, Any] = {
            "model": name,
            "peak_bytes": m.peak_bytes,
            "allocated_bytes": m.allocated_bytes,
            "measured_bytes": None,
        }
        before = _stats(device)
        if not before or "peak_bytes_in_use" not in before:
            row["note"] = f"{device.platform} reports no memory_stats(): nothing measured"
            rows.append(row)
            continue
        placed = jax.device_put(args, device)
        jax.block_until_ready(placed)
        ready = _stats(device) or {}
        jax.block_until_ready(compiled(*placed))
        after = _stats(device) or {}
        arg_bytes = sum(x.nbytes for x in jax.tree.leaves(placed))
        if after.get("peak_bytes_in_use", 0) > ready.get("peak_bytes_in_use", 0):
            measured = after["peak_bytes_in_use"] - ready["bytes_in_use"] + arg_bytes
            row["measured_bytes"] = measured
            row["ratio_to_peak"] = measured / m.peak_bytes
            row["ratio_to_allocated"] = measured / m.allocated_bytes if m.allocated_bytes else None
            ratio = row["ratio_to_allocated"] or row["ratio_to_peak"]
            row["note"] = (
                "within 10 %"
                if abs(ratio - 1) <= 0.10
                else "the allocator rounds each buffer up and keeps XLA's whole temporary "
                "block: compare with allocated_bytes"
            )
        else:
            row["note"] = (
                "the process peak was set before this call (e.g. by autotuning): "
                "this call's peak is not separable"
            )
        del placed
        rows.append(row)
    return rows


def memory_table(rows: list[dict[str, Any]]) -> str:
    head = [
        "model",
        "map peak (live)",
        "XLA allocation",
        "measured peak",
        "measured / allocation",
        "note",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        ratio = r.get("ratio_to_allocated")
        cells = [
            r["model"],
            r["peak_bytes"],
            r["allocated_bytes"],
            r["measured_bytes"] or "—",
            f"{ratio:.3f}" if ratio else "—",
            r.get("note", ""),
        ]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)
