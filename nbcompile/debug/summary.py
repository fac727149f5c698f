"""Small, JSON-ready summaries of array values (what the debugger keeps instead of arrays).

A summary holds shape, dtype, size, min/max/mean over the *finite* elements, NaN and Inf counts,
and an 8-bin histogram of the finite elements (``edges`` has 9 entries). Booleans count as 0/1,
complex values are summarised by magnitude (``of: "abs"``). PRNG key arrays only get shape and
dtype. All numbers are plain Python floats/ints, never NaN, so the summary is valid JSON.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

__all__ = ["BINS", "has_inf", "has_nan", "summarise"]

BINS = 8


def _host(value: Any) -> np.ndarray | None:
    """The value as a NumPy array, or None for values with no numeric view (PRNG keys, tokens)."""
    dtype = getattr(value, "dtype", None)
    if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return None
    try:
        return np.asarray(jax.device_get(value))
    except (TypeError, ValueError):
        return None


def _numeric(a: np.ndarray) -> tuple[np.ndarray, str | None]:
    if np.iscomplexobj(a):
        return np.abs(a).astype(np.float64), "abs"
    return a.astype(np.float64), None  # bool, ints, float16 / bfloat16 / float8 included


def _is_inexact(a: np.ndarray) -> bool:
    return np.issubdtype(a.dtype, np.inexact) or a.dtype.kind == "V" or "float" in str(a.dtype)


def has_nan(value: Any) -> bool:
    a = _host(value)
    return a is not None and _is_inexact(a) and bool(np.isnan(_numeric(a)[0]).any())


def has_inf(value: Any) -> bool:
    a = _host(value)
    return a is not None and _is_inexact(a) and bool(np.isinf(_numeric(a)[0]).any())


def summarise(value: Any) -> dict[str, Any]:
    """Summary of one array value (see the module docstring for the fields)."""
    shape = [int(d) for d in getattr(value, "shape", ())]
    dtype = str(getattr(value, "dtype", type(value).__name__))
    out: dict[str, Any] = {
        "shape": shape,
        "dtype": dtype,
        "size": int(np.prod(shape)) if shape else 1,
        "min": None,
        "max": None,
        "mean": None,
        "nan": 0,
        "inf": 0,
        "hist": None,
    }
    a = _host(value)
    if a is None:
        return out
    x, of = _numeric(a)
    if of:
        out["of"] = of
    if _is_inexact(a):
        out["nan"] = int(np.isnan(x).sum())
        out["inf"] = int(np.isinf(x).sum())
    finite = x[np.isfinite(x)]
    if finite.size == 0:
        return out
    lo, hi = float(finite.min()), float(finite.max())
    counts, edges = _histogram(finite, lo, hi)
    out.update(
        min=lo,
        max=hi,
        mean=_mean(finite),
        hist={"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]},
    )
    return out


def _histogram(finite: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """BINS counts over [lo, hi]. Values too close together for BINS distinct edges at their
    magnitude (one constant such as an attention mask's ``finfo(float32).min``: ``lo ± 0.5`` is
    ``lo`` again) get one bin-width around their middle that is representable there; a range
    wider than float64 can hold (``hi - lo`` overflows) is binned at half scale."""
    if not np.isfinite(hi - lo):
        counts, edges = np.histogram(finite / 2, bins=BINS, range=(lo / 2, hi / 2))
        return counts, edges * 2
    mid = lo / 2 + hi / 2
    if hi - lo <= abs(mid) * 1e-12:  # one value, at float64 precision (2e-16) and BINS
        half = max(0.5, abs(mid) * 1e-6)
        return np.histogram(finite, bins=BINS, range=(mid - half, mid + half))
    return np.histogram(finite, bins=BINS, range=(lo, hi))


def _mean(finite: np.ndarray) -> float:
    """The mean, without overflowing where the sum of huge values would (float64 near 1e308)."""
    with np.errstate(over="ignore"):
        mean = float(finite.mean())
    return mean if np.isfinite(mean) else float(np.sum(finite / finite.size))


def short(summary: dict[str, Any]) -> str:
    """One line: ``f32[4,8] min -1.2 max 3.4 mean 0.1 (2 NaN, 1 Inf)``."""
    dtype = summary["dtype"]
    short_dtype = dtype.replace("float", "f").replace("uint", "u").replace("int", "i")
    text = f"{short_dtype}{summary['shape']}".replace(" ", "")
    if summary["min"] is not None:
        text += f" min {summary['min']:.4g} max {summary['max']:.4g} mean {summary['mean']:.4g}"
    bad = [
        f"{summary[k]} {k.upper() if k == 'nan' else 'Inf'}" for k in ("nan", "inf") if summary[k]
    ]
    bad = [b.replace("NAN", "NaN") for b in bad]
    return text + (f" ({', '.join(bad)})" if bad else "")
