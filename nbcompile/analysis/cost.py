"""Cost and memory figures: XLA's own (normalised) and nbcompile's analytic ones from the jaxpr.

XLA's figures are best effort: a backend may give none, or -1 for "unknown". Both become None
here; nothing is ever invented. Keys are snake_case: ``flops``, ``bytes_accessed``,
``transcendentals``, ``optimal_seconds``, per-operand ``bytes_accessed_operand0`` /
``bytes_accessed_output`` and so on.
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["analytic_cost", "normalise_cost", "normalise_memory"]

_MEMORY_FIELDS = {
    "argument_bytes": "argument_size_in_bytes",
    "output_bytes": "output_size_in_bytes",
    "temp_bytes": "temp_size_in_bytes",
    "alias_bytes": "alias_size_in_bytes",
    "generated_code_bytes": "generated_code_size_in_bytes",
    "host_temp_bytes": "host_temp_size_in_bytes",
    "peak_bytes": "peak_memory_in_bytes",
}


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) or number < 0 else number


def _key(raw: str) -> str:
    key = raw.strip()
    m = re.fullmatch(r"(.*?)(\d+|out)\{(.*)\}", key)
    if m:
        which = "output" if m.group(2) == "out" else f"operand{m.group(2)}"
        index = re.sub(r"\W+", "_", m.group(3)).strip("_")
        key = f"{m.group(1)}_{which}" + (f"_{index}" if index else "")
    return re.sub(r"[^0-9a-z]+", "_", key.lower()).strip("_")


def normalise_cost(raw: Any) -> dict[str, float | None] | None:
    """XLA's ``cost_analysis()`` (dict, or a one-element list of dicts) as snake_case figures."""
    if isinstance(raw, list | tuple):
        raw = raw[0] if raw else None
    if not isinstance(raw, dict) or not raw:
        return None
    out: dict[str, float | None] = {
        "flops": None,
        "bytes_accessed": None,
        "transcendentals": None,
        "optimal_seconds": None,
    }
    for key, value in raw.items():
        out[_key(str(key))] = _number(value)
    return out


def normalise_memory(stats: Any) -> dict[str, float | None] | None:
    """``memory_analysis()`` as a dict of byte counts (None where the backend gives none)."""
    if stats is None:
        return None
    out = {key: _number(getattr(stats, attr, None)) for key, attr in _MEMORY_FIELDS.items()}
    if out["peak_bytes"] is None and None not in (
        out["argument_bytes"],
        out["output_bytes"],
        out["temp_bytes"],
    ):
        # Upper bound when XLA does not report a peak: everything live at once, minus aliasing.
        out["peak_bytes"] = (
            out["argument_bytes"]
            + out["output_bytes"]
            + out["temp_bytes"]
            - (out["alias_bytes"] or 0.0)
        )
        out["peak_bytes_is_bound"] = 1.0
    return out if any(v is not None for v in out.values()) else None


def analytic_cost(eqns: list[Any]) -> dict[str, float]:
    """nbcompile's own figures from the jaxpr: flops (multiply-add = 2, scan bodies times their
    length, while bodies once) and the bytes every equation reads and writes if run alone."""
    flops = sum(e.node.flops or 0.0 for e in eqns if not e.is_call)
    nbytes = sum(e.bytes for e in eqns if not e.is_call)
    return {
        "flops": float(flops),
        "bytes_accessed": float(nbytes),
        "equations": float(sum(1 for e in eqns if not e.is_call)),
    }
