"""``profile_delta(before, after)``: what changed in time between two profiles, per call, per
kernel, per location and per module (for ``c_new.diff(c_old)``).

Locations are the stable key across two compiles of the same code; kernel names are XLA's and
can be renumbered by any change, so a kernel present on one side only is listed as added or
removed rather than matched by guess. Each figure keeps both sides' ``source``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..units import format_seconds
from ._kernels import location_json, location_label
from ._result import Profile

__all__ = ["ProfileDelta", "profile_delta"]


def _pairs(a: dict[Any, float], b: dict[Any, float]) -> list[tuple[Any, float, float, float]]:
    """``(key, before, after, after - before)`` for every key, largest change first."""
    keys = set(a) | set(b)
    rows = [(k, a.get(k, 0.0), b.get(k, 0.0), b.get(k, 0.0) - a.get(k, 0.0)) for k in keys]
    return sorted(rows, key=lambda r: (-abs(r[3]), location_label(r[0])))


@dataclass
class ProfileDelta:
    """Time deltas (``after - before``, seconds per call; negative = faster)."""

    before_source: str
    after_source: str
    step_before: float
    step_after: float
    kernels: list[tuple[str, float, float, float]] = field(default_factory=list)
    by_line: list[tuple[Any, float, float, float]] = field(default_factory=list)
    by_module: list[tuple[str, float, float, float]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def step_delta(self) -> float:
        return self.step_after - self.step_before

    @property
    def speedup(self) -> float | None:
        return self.step_before / self.step_after if self.step_after else None

    def to_json(self) -> dict[str, Any]:
        def rows(items: list[tuple[Any, float, float, float]], key: str) -> list[dict]:
            return [
                {
                    key: location_json(k) if key == "location" else k,
                    "before": b,
                    "after": a,
                    "delta": d,
                }
                for k, b, a, d in items
            ]

        return {
            "source": {"before": self.before_source, "after": self.after_source},
            "step_before": self.step_before,
            "step_after": self.step_after,
            "step_delta": self.step_delta,
            "speedup": self.speedup,
            "kernels": rows(self.kernels, "name"),
            "by_line": rows(self.by_line, "location"),
            "by_module": rows(self.by_module, "module"),
            "notes": list(self.notes),
        }

    def text(self, top: int = 8) -> str:
        sign = "faster" if self.step_delta < 0 else "slower"
        out = [
            f"{format_seconds(self.step_before)} → {format_seconds(self.step_after)} per call "
            f"({format_seconds(abs(self.step_delta))} {sign})"
        ]
        for loc, b, a, d in self.by_line[:top]:
            out.append(
                f"  {location_label(loc)}: {format_seconds(b)} → {format_seconds(a)} "
                f"({'+' if d >= 0 else '−'}{format_seconds(abs(d))})"
            )
        out += [f"note: {n}" for n in self.notes]
        return "\n".join(out)


def profile_delta(before: Profile, after: Profile) -> ProfileDelta:
    """Per-call, per-kernel, per-location and per-module time deltas from ``before`` to
    ``after`` (two profiles of the same model, e.g. before and after an edit)."""
    notes = []
    if before.source != after.source:
        notes.append(f"comparing a {before.source} profile with a {after.source} one")
    kb = {k.name: k.seconds for k in before.kernels}
    ka = {k.name: k.seconds for k in after.kernels}
    only = set(kb) ^ set(ka)
    if only:
        notes.append(
            f"{len(only)} kernel(s) exist on one side only (XLA names kernels per "
            "compile): compare by line"
        )
    return ProfileDelta(
        before_source=before.source,
        after_source=after.source,
        step_before=before.step_seconds,
        step_after=after.step_seconds,
        kernels=_pairs(kb, ka),
        by_line=_pairs(before.by_line, after.by_line),
        by_module=_pairs(before.by_module, after.by_module),
        notes=notes,
    )
