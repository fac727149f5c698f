"""The profile part of ``make gpu-check`` (scripts/gpu_check.py): ``--profile`` on real hardware.

Profiles each check model with :func:`nbcompile.measure.profile` and tabulates where the kernel
events came from (on a GPU they must be the device plane's, ``/device:GPU:0``; on a CPU the XLA
client's threads), the coverage of execution time by named kernels, the call time and the top
kernel with its roofline class. Runs anywhere (the test runs it on the CPU at a small scale).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["profile_models", "profile_table"]


def profile_models(
    models: dict[str, tuple[Callable[..., Any], tuple[Any, ...]]], calls: int = 10
) -> list[dict[str, Any]]:
    """One row per model: plane, coverage, call time, kernels seen, top kernel."""
    import jax

    import nbcompile
    from nbcompile.measure import profile

    rows = []
    for name, (fn, args) in models.items():
        p = profile(nbcompile.compile(fn, *args), calls=calls)
        top = p.kernels[0]
        rows.append(
            {
                "model": name,
                "backend": jax.default_backend(),
                "where": p.where,
                "device_plane": p.where.startswith("/device:"),
                "step_ms": p.step_seconds * 1e3,
                "coverage": p.coverage,
                "kernels": len(p.kernels),
                "top_kernel": top.name,
                "top_share": top.share,
                "top_bound": top.bound,
                "top_roof": top.roof_fraction,
                "peaks": p.peaks.to_json() if p.peaks else None,
                "gap": p.gap,
                "notes": list(p.notes),
            }
        )
    return rows


def profile_table(rows: list[dict[str, Any]]) -> str:
    """The rows as a GitHub markdown table."""
    head = [
        "model",
        "backend",
        "kernel events from",
        "call ms",
        "coverage",
        "kernels",
        "top kernel",
        "share",
        "bound",
        "of roof",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        roof = f"{r['top_roof']:.0%}" if r["top_roof"] is not None else "—"
        cells = [
            r["model"],
            r["backend"],
            r["where"],
            f"{r['step_ms']:.3f}",
            f"{r['coverage']:.1%}" if r["coverage"] is not None else "—",
            r["kernels"],
            r["top_kernel"],
            f"{r['top_share']:.1%}",
            r["top_bound"] or "—",
            roof,
        ]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)
