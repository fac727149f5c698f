"""The printed table and the ``--check`` comparison against a stored run.

``--check`` rule: a row regresses when its checked figure (the ratio where the row has one,
else the subject) moved the wrong way by more than the noise margin, which is the larger of
15 % relative and the relative spread (IQR, or min–max below five values) of either run.
Informative rows (``better == "none"``, e.g. eager vs compiled) are shown, never failed.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks._stats import Row, Summary

__all__ = ["MIN_MARGIN", "Finding", "compare", "format_table", "format_value"]

MIN_MARGIN = 0.15


def format_value(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "bytes":
        for name, scale in (("MB", 1e6), ("KB", 1e3)):
            if abs(value) >= scale:
                return f"{value / scale:.3g} {name}"
        return f"{value:.0f} B"
    if unit == "count":
        return f"{value:,.0f}"
    a = abs(value)
    if a >= 1:
        return f"{value:.2f} s"
    if a >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return f"{value * 1e6:.3g} µs"


def _ratio_text(s: Summary | None) -> str:
    if s is None:
        return "—"
    if s.n == 1:
        return f"{s.median:.3g}"
    lo, hi = s.spread
    return f"{s.median:.3g} [{lo:.3g}–{hi:.3g}]"


def _target_text(row: Row) -> str:
    if row.target is None:
        return "—"
    if row.target.on == "diff" and row.diff is not None:
        return f"{row.target.text} (got {row.diff.median * 1e3:+.1f} ms)"
    return row.target.text


def format_table(rows: list[Row]) -> str:
    """One plain-text table: figure, model, subject, anchor, ratio [spread], target, status."""
    header = ("figure", "model", "subject", "anchor", "ratio [spread]", "target", "status")
    body = [
        (
            r.figure,
            r.model,
            format_value(r.subject.median if r.subject else None, r.unit),
            format_value(r.anchor.median if r.anchor else None, r.unit),
            _ratio_text(r.ratio),
            _target_text(r),
            r.status,
        )
        for r in rows
    ]
    widths = [
        max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(header)
    ]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [line.format(*header), line.format(*("-" * w for w in widths))]
    out += [line.format(*b) for b in body]
    out.append("")
    out.append(
        "ratio = subject / anchor, per interleaved pair; [spread] = IQR (n >= 5) or "
        "min–max (n < 5); subject/anchor columns are medians."
    )
    for i, r in enumerate(rows, 1):
        labels = r.subject_label + (f" vs {r.anchor_label}" if r.anchor_label else "")
        n = f"n={r.subject.n}" if r.subject else "not measured"
        out.append(f"  [{i}] {r.key}: {labels}; {n}; {r.note}")
    return "\n".join(out)


@dataclass(frozen=True)
class Finding:
    key: str
    on: str
    old: float
    new: float
    margin: float
    regressed: bool

    def text(self) -> str:
        change = (self.new / self.old - 1) * 100 if self.old else float("inf")
        verdict = "REGRESSION" if self.regressed else "ok"
        return (
            f"{verdict:10s} {self.key}: {self.on} {self.old:.4g} -> {self.new:.4g} "
            f"({change:+.1f} %, margin ±{self.margin * 100:.0f} %)"
        )


def _checked(row: Row) -> tuple[str, Summary] | None:
    if row.ratio is not None:
        return "ratio", row.ratio
    if row.subject is not None:
        return "subject", row.subject
    return None


def compare(old: list[Row], new: list[Row], min_margin: float = MIN_MARGIN) -> list[Finding]:
    """One Finding per row measured in both runs (same figure and model) on the same figure."""
    before = {r.key: r for r in old}
    findings = []
    for row in new:
        prev = before.get(row.key)
        if prev is None or row.better == "none":
            continue
        a, b = _checked(prev), _checked(row)
        if a is None or b is None or a[0] != b[0]:
            continue
        margin = max(min_margin, a[1].relative_spread(), b[1].relative_spread())
        o, n = a[1].median, b[1].median
        worse = n > o * (1 + margin) if row.better == "lower" else n < o / (1 + margin)
        findings.append(Finding(row.key, a[0], o, n, margin, worse))
    return findings
