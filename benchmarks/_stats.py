"""Measurement plumbing: interleaved pairs, summaries (median, IQR, min–max), rows and targets.

Every ratio is computed pair by pair (subject run *i* over the anchor run measured right next to
it, in alternating order) and then summarised, so slow phases of a shared machine hit both sides
of a pair instead of biasing one side.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Row", "Summary", "Target", "paired", "summarise", "timed"]


@dataclass(frozen=True)
class Summary:
    """Median and spread of repeated measurements (``values`` kept for the record)."""

    median: float
    q1: float
    q3: float
    min: float
    max: float
    n: int
    values: tuple[float, ...]

    @property
    def spread_kind(self) -> str:
        """IQR needs at least five values to mean anything; below that we show min–max."""
        return "IQR" if self.n >= 5 else "min-max"

    @property
    def spread(self) -> tuple[float, float]:
        return (self.q1, self.q3) if self.spread_kind == "IQR" else (self.min, self.max)

    def relative_spread(self) -> float:
        lo, hi = self.spread
        return (hi - lo) / abs(self.median) if self.median else 0.0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["values"] = list(self.values)
        data["spread_kind"] = self.spread_kind
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Summary | None:
        if not data:
            return None
        fields = ("median", "q1", "q3", "min", "max", "n")
        return cls(**{k: data[k] for k in fields}, values=tuple(data.get("values", ())))


def summarise(values: list[float]) -> Summary:
    """Median, quartiles (inclusive method) and range of ``values``."""
    if not values:
        raise ValueError("no measurements to summarise")
    vals = sorted(float(v) for v in values)
    if len(vals) >= 2:
        q1, _, q3 = statistics.quantiles(vals, n=4, method="inclusive")
    else:
        q1 = q3 = vals[0]
    return Summary(statistics.median(vals), q1, q3, vals[0], vals[-1], len(vals), tuple(values))


def timed(fn: Callable[[], Any]) -> float:
    """Wall seconds of one call of ``fn``."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def paired(
    subject: Callable[[], float], anchor: Callable[[], float], pairs: int
) -> tuple[list[float], list[float]]:
    """Run ``pairs`` (subject, anchor) measurements, alternating which side goes first."""
    subj: list[float] = []
    anch: list[float] = []
    for i in range(pairs):
        if i % 2 == 0:
            subj.append(subject())
            anch.append(anchor())
        else:
            anch.append(anchor())
            subj.append(subject())
    return subj, anch


@dataclass(frozen=True)
class Target:
    """``on`` (ratio / subject / diff) must be ``op`` (<= or >=) ``value``."""

    on: str
    op: str
    value: float
    text: str

    def met(self, row: Row) -> bool | None:
        got = row.metric(self.on)
        if got is None:
            return None
        return got <= self.value if self.op == "<=" else got >= self.value


def ratio_at_most(value: float | None) -> Target | None:
    """The usual target: the row's ratio at most ``value`` (None: an informative row)."""
    return None if value is None else Target("ratio", "<=", value, f"≤ {value:g}")


@dataclass
class Row:
    """One line of the table: subject vs anchor, their pairwise ratio, and the target."""

    figure: str
    model: str
    unit: str  # "s" or "bytes"
    subject_label: str
    anchor_label: str | None
    subject: Summary | None = None
    anchor: Summary | None = None
    ratio: Summary | None = None
    diff: Summary | None = None
    target: Target | None = None
    better: str = "lower"  # direction of the ratio for --check: "lower" or "higher"
    note: str = ""
    failed: bool = False  # measured and missed in a way no number shows (e.g. nothing drawn)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.figure} | {self.model}"

    def metric(self, on: str) -> float | None:
        summary = {"ratio": self.ratio, "subject": self.subject, "diff": self.diff}[on]
        return None if summary is None else summary.median

    @property
    def status(self) -> str:
        if self.failed:
            return "fail"
        if self.subject is None:
            return "na"
        if self.target is None:
            return "info"
        met = self.target.met(self)
        return "na" if met is None else ("pass" if met else "fail")

    def set_pairs(self, subject: list[float], anchor: list[float] | None = None) -> None:
        """Fill subject/anchor summaries and the pairwise ratio and difference."""
        self.subject = summarise(subject)
        if anchor is None:
            return
        self.anchor = summarise(anchor)
        ratios = [s / a for s, a in zip(subject, anchor, strict=True) if a > 0]
        if ratios:
            self.ratio = summarise(ratios)
        self.diff = summarise([s - a for s, a in zip(subject, anchor, strict=True)])

    def to_json(self) -> dict[str, Any]:
        def js(s: Summary | None) -> dict[str, Any] | None:
            return None if s is None else s.to_json()

        return {
            "key": self.key,
            "figure": self.figure,
            "model": self.model,
            "unit": self.unit,
            "subject_label": self.subject_label,
            "anchor_label": self.anchor_label,
            "subject": js(self.subject),
            "anchor": js(self.anchor),
            "ratio": js(self.ratio),
            "diff": js(self.diff),
            "target": None if self.target is None else asdict(self.target),
            "better": self.better,
            "status": self.status,
            "note": self.note,
            "failed": self.failed,
            "extra": self.extra,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Row:
        target = data.get("target")
        return cls(
            figure=data["figure"],
            model=data["model"],
            unit=data["unit"],
            subject_label=data["subject_label"],
            anchor_label=data.get("anchor_label"),
            subject=Summary.from_json(data.get("subject")),
            anchor=Summary.from_json(data.get("anchor")),
            ratio=Summary.from_json(data.get("ratio")),
            diff=Summary.from_json(data.get("diff")),
            target=Target(**target) if target else None,
            better=data.get("better", "lower"),
            note=data.get("note", ""),
            failed=data.get("failed", False),
            extra=data.get("extra", {}),
        )


def cold() -> None:
    """Forget what nbcompile remembers across compiles of the same program (the analysis cache,
    the renderers' memos), so a repetition measures a first compile, as a user's is."""
    from nbcompile.analysis import clear_analysis_cache
    from nbcompile.report import forget_memos

    clear_analysis_cache()
    forget_memos()
