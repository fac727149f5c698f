"""Where every figure comes from: "XLA", "measured", "estimate" or "spec".

A *figure* is a quantity of work, traffic, memory or time (flops, bytes, seconds, shares): the
keys in :data:`FIGURE_KEYS`, or any key ending in ``_seconds`` / ``_bytes`` / ``_flops``. In the
JSON of an analysis or a report, each dict that holds figures says where they came from in a
``"from"`` key: either one label for every figure in the dict and below it, or a map from figure
key (or from the key of a nested dict, for everything in it; ``"*"`` for the rest) to label. A
``"from"`` applies to the dict it is in and everything nested in it, until a nested ``"from"``
says otherwise (so a graph labels all its nodes once). Counts of program structure (ops,
kernels, fusions, line numbers, shapes) are not figures: they are exact.

* ``XLA``: reported by XLA (``cost_analysis()``, ``memory_analysis()``, its HLO cost model, or
  the shapes of XLA's optimised program);
* ``measured``: timed or observed on this machine;
* ``estimate``: computed by nbcompile from the program's shapes and op counts (exact for what
  it counts, not a measurement of the hardware);
* ``spec``: from a hardware specification (peak flops, bandwidth, memory size).

:func:`unlabelled` lists every figure a JSON document leaves without a label (the test of "no
renderer shows an estimate unlabelled" walks whole reports with it).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["FIGURE_DICTS", "FIGURE_KEYS", "SOURCES", "is_figure", "label_of", "unlabelled"]

SOURCES = ("XLA", "measured", "estimate", "spec")

FIGURE_KEYS = frozenset(
    {
        "flops",
        "bytes",
        "bytes_accessed",
        "transcendentals",
        "optimal_seconds",
        "seconds",
        "cost_share",
        "bytes_saved",
        "bytes_saved_by_fusion",
        "residual_bytes",
        "peak_bytes",
        "analytic_flops",
        "analytic_bytes",
        "utilization",
        "speedup",
        "median",
        "mean",
    }
)
_SUFFIXES = ("_seconds", "_bytes", "_flops", "_bytes_accessed")
#: dicts whose every number is a figure, whatever its key (``timings``: seconds per stage)
FIGURE_DICTS = frozenset({"timings", "cost", "memory", "analytic"})


def is_figure(key: str, value: Any) -> bool:
    """Whether ``key: value`` is a figure that must carry its source."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return key in FIGURE_KEYS or key.endswith(_SUFFIXES) or key.startswith("bytes_accessed")


def label_of(key: str, labels: Any) -> str | None:
    """The label ``labels`` (a ``"from"`` value: one string, or a map) gives figure ``key``."""
    if isinstance(labels, str):
        return labels
    if isinstance(labels, dict):
        found = labels.get(key, labels.get("*"))
        return found if isinstance(found, str) else None
    return None


def _walk(obj: Any, path: str, inherited: list[Any], all_figures: bool = False) -> Iterator[str]:
    if isinstance(obj, dict):
        own = obj.get("from")
        scopes = [*inherited, own] if own is not None else inherited
        for key, value in obj.items():
            if key == "from":
                continue
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if (all_figures and number) or is_figure(str(key), value):
                label = next(
                    (lab for s in reversed(scopes) if (lab := label_of(str(key), s)) is not None),
                    None,
                )
                if label not in SOURCES:
                    yield f"{path}.{key}"
            elif isinstance(value, dict | list):
                # a "from" map may label a whole nested dict: {"timings": "measured"}
                inner = own.get(key) if isinstance(own, dict) else None
                nested = [*scopes, inner] if isinstance(inner, str) else scopes
                yield from _walk(value, f"{path}.{key}", nested, key in FIGURE_DICTS)
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield from _walk(value, f"{path}[{i}]", inherited)


def unlabelled(document: Any) -> list[str]:
    """Paths (``$.summary.flops``) of the figures in ``document`` without a valid source."""
    return list(_walk(document, "$", []))
