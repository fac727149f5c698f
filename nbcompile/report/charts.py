"""The Stats tab's charts as standalone SVG (the static fallback): the same pictures as
``js/charts.js`` draws in the widget — horizontal bars, the op-count funnel, a log-log roofline,
a stacked memory timeline — each with a title and a caption naming where its figures come from.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from html import escape
from typing import Any

from .graphmodel import fmt_num, trunc

__all__ = [
    "KIND_COLOURS",
    "bar_chart",
    "fmt_bytes",
    "fmt_seconds",
    "funnel",
    "roofline",
    "stacked_area",
    "trunc_start",
]

KIND_COLOURS = {
    "parameter": "#90a4ae",
    "output": "#66bb6a",
    "residual": "#ffa726",
    "temporary": "#42a5f5",
    "constant": "#bdbdbd",
}
_FUNNEL = ["#a9cbee", "#93bdea", "#7eb0e6", "#f1b27c", "#ec8f3d"]
_STYLE = (
    "<style>text{font-family:DejaVu Sans Mono,Menlo,Consolas,monospace;font-size:10.5px;"
    "fill:#222}text.v{fill:#666}text.b{font-weight:bold}text.h{font-size:12px;"
    "font-weight:bold;font-family:system-ui,sans-serif}text.s{fill:#666;font-size:10px;"
    "font-family:system-ui,sans-serif}</style>"
)


def fmt_bytes(x: float | None) -> str:
    """Binary units, as the view writes them: 1536 -> "1.5 KiB"."""
    if x is None:
        return "–"
    units, v, i = ["B", "KiB", "MiB", "GiB", "TiB"], float(x), 0
    while v >= 1024 and i < len(units) - 1:
        v /= 1024
        i += 1
    return f"{int(v)} B" if i == 0 else f"{v:.0f} {units[i]}" if v >= 100 else f"{v:.1f} {units[i]}"


def fmt_seconds(x: float | None) -> str:
    if x is None:
        return "–"
    if 0 < x < 1e-6:
        return f"{x * 1e9:.0f} ns"
    if x < 1e-3:
        return f"{x * 1e6:.1f} µs" if x < 1e-5 else f"{x * 1e6:.0f} µs"
    return f"{x * 1e3:.1f} ms" if x < 1 else f"{x:.2f} s"


def _frame(width: float, height: float, title: str, source: str, body: list[str]) -> str:
    """A chart as one SVG document: title on top, the source caption below."""
    total = height + 40
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{total:.0f}" '
        f'viewBox="0 0 {width:.0f} {total:.0f}">{_STYLE}'
        f'<rect width="{width:.0f}" height="{total:.0f}" fill="#fff" stroke="#ccc"/>'
        f'<text class="h" x="8" y="16">{escape(title)}</text>'
        f'<g transform="translate(0,22)">{"".join(body)}</g>'
        f'<text class="s" x="8" y="{total - 6:.0f}">source: {escape(source)}</text></svg>'
    )


def bar_chart(
    rows: Sequence[tuple[str, float, str]] | Sequence[tuple[str, float, str, str | None]],
    *,
    title: str,
    source: str,
    width: int = 460,
    label_chars: int = 28,
    where_title: str = "call / module",
    where_chars: int = 22,
) -> str:
    """Horizontal bars on one linear scale: rows ``(label, value, text)`` or ``(label, value,
    text, where)``; a row's ``where`` (the call or module a kernel came from) goes in a first
    column of its own, titled ``where_title`` (``barChart``)."""
    wheres = [r[3] if len(r) > 3 else None for r in rows]
    with_where = any(wheres)
    row_h = 18
    where_w = where_chars * 6.6 + 8 if with_where else 0
    top_pad = 14 if with_where else 0
    left, right = where_w + min(220.0, label_chars * 6.6 + 8), 70
    total_w = width + where_w
    height = len(rows) * row_h + 6 + top_pad
    top = max([1e-30, *(r[1] for r in rows)])
    body = [f'<text class="b" x="4" y="10">{escape(where_title)}</text>'] if with_where else []
    for i, row in enumerate(rows):
        label, value, text = row[0], row[1], row[2]
        y = top_pad + 3 + i * row_h
        w = max(1.0, value / top * (total_w - left - right))
        where = wheres[i] or "–"
        if with_where:
            body.append(
                f'<text x="4" y="{y + 12}" data-testid="nbc-bar-where">'
                f"{escape(trunc_start(where, where_chars))}</text>"
            )
        hover = f"{where} · {label}" if wheres[i] else label
        body.append(
            f'<text x="{left - 6:.0f}" y="{y + 12}" text-anchor="end">'
            f"{escape(trunc(label, label_chars))}</text>"
            f'<rect x="{left:.0f}" y="{y + 2}" width="{w:.1f}" height="{row_h - 5}" rx="2" '
            f'fill="#1976d28c"><title>{escape(hover)}: {escape(text)}</title></rect>'
            f'<text class="v" x="{left + w + 4:.1f}" y="{y + 12}">{escape(text)}</text>'
        )
    return _frame(total_w, height, title, source, body)


def trunc_start(text: str, n: int) -> str:
    """Cut a path from its start, keeping its end (``truncStart``): whole names first
    (``…/blocks_0/up``), characters where one name alone is too long."""
    if len(text) <= n:
        return text
    parts = text.split("/")
    while len(parts) > 1 and len("/".join(parts)) + 2 > n:
        parts.pop(0)
    cut = "…/" + "/".join(parts)
    return cut if len(cut) <= n else "…" + text[len(text) - n + 1 :]


def funnel(
    stages: Sequence[tuple[str, float | None]], *, title: str, source: str, width: int = 460
) -> str:
    """The op-count funnel: each stage's count as a centred bar."""
    row_h, left = 24, 200
    height = len(stages) * row_h + 4
    top = max([1.0, *(v or 0 for _, v in stages)])
    mid = left + (width - left) / 2
    body = []
    for i, (label, value) in enumerate(stages):
        y = 2 + i * row_h
        w = max(2.0, (value or 0) / top * (width - left - 8))
        body.append(
            f'<rect x="{mid - w / 2:.1f}" y="{y}" width="{w:.1f}" height="{row_h - 4}" '
            f'rx="3" fill="{_FUNNEL[i % len(_FUNNEL)]}"/>'
            f'<text x="6" y="{y + 14}">{escape(label)}</text>'
            f'<text class="b" x="{mid:.1f}" y="{y + 14}" text-anchor="middle">'
            f"{'–' if value is None else fmt_num(value)}</text>"
        )
    return _frame(width, height, title, source, body)


def _ticks(lo: int, hi: int, pos: Callable[[float], float], axis: str, fixed: float) -> list[str]:
    out = []
    for e in range(lo, hi + 1):
        if axis == "x":
            out.append(
                f'<text class="v" x="{pos(10.0**e):.1f}" y="{fixed:.0f}" '
                f'text-anchor="middle">{fmt_num(10.0**e)}</text>'
            )
        else:
            out.append(
                f'<text class="v" x="{fixed:.0f}" y="{pos(10.0**e) + 4:.1f}" '
                f'text-anchor="end">{fmt_num(10.0**e)}</text>'
            )
    return out


def roofline(
    points: Sequence[dict[str, Any]],
    peak_flops: float | None,
    peak_bytes: float | None,
    *,
    title: str,
    source: str,
    width: int = 460,
    height: int = 260,
) -> str:
    """Achieved FLOP/s against arithmetic intensity, log-log, under the roof
    ``min(peak FLOP/s, intensity x peak bytes/s)``; points ``{name, intensity, achieved,
    share, bound}``."""
    left, right, top_m, bottom = 56, 12, 10, 34
    pts = [p for p in points if (p.get("intensity") or 0) > 0 and (p.get("achieved") or 0) > 0]
    ridge = peak_flops / peak_bytes if peak_flops and peak_bytes else 1.0
    xs = [p["intensity"] for p in pts] + [ridge]
    ys = [p["achieved"] for p in pts] + ([peak_flops] if peak_flops else [])
    x0, x1 = math.floor(math.log10(min(xs)) - 0.5), math.ceil(math.log10(max(xs)) + 0.5)
    y0, y1 = math.floor(math.log10(min(ys)) - 0.5), math.ceil(math.log10(max(ys)) + 0.3)

    def px(v: float) -> float:
        return left + (math.log10(v) - x0) / max(1e-9, x1 - x0) * (width - left - right)

    def py(v: float) -> float:
        return top_m + (1 - (math.log10(v) - y0) / max(1e-9, y1 - y0)) * (height - top_m - bottom)

    body = [
        f'<rect x="{left}" y="{top_m}" width="{width - left - right}" '
        f'height="{height - top_m - bottom}" fill="none" stroke="#bbb"/>'
    ]
    body += _ticks(x0, x1, px, "x", height - bottom + 14) + _ticks(y0, y1, py, "y", left - 4)
    body.append(
        f'<text class="v" x="{(left + width - right) / 2:.0f}" y="{height - 4}" '
        'text-anchor="middle">arithmetic intensity (flop / byte)</text>'
    )
    if peak_flops and peak_bytes:
        a, b = 10.0**x0, 10.0**x1
        body.append(
            f'<path d="M{px(a):.1f},{py(min(peak_flops, a * peak_bytes)):.1f} '
            f'L{px(ridge):.1f},{py(peak_flops):.1f} L{px(b):.1f},{py(peak_flops):.1f}" '
            'fill="none" stroke="#d32f2f" stroke-width="2"/>'
        )
    colours = {"compute": ("#e65100", "#bf360c"), "memory": ("#1e88e5", "#0d47a1")}
    for i, p in enumerate(sorted(pts, key=lambda p: -(p.get("share") or 0))):
        fill, stroke = colours.get(p.get("bound") or "", ("#9e9e9e", "#616161"))
        r = 3 + 9 * math.sqrt(p.get("share") or 0)
        x, y = px(p["intensity"]), py(p["achieved"])
        body.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r:.1f}" fill="{fill}" '
            f'fill-opacity="0.6" stroke="{stroke}"><title>{escape(p["name"])}</title>'
            "</circle>"
        )
        if i < 3:
            body.append(
                f'<text class="v" x="{x + 8:.1f}" y="{y - 6:.1f}">'
                f"{escape(trunc(p['name'], 22))}</text>"
            )
    return _frame(width, height, title, source, body)


def stacked_area(
    series: Sequence[tuple[str, Sequence[float]]],
    *,
    title: str,
    source: str,
    spans: Sequence[tuple[int, int, str]] = (),
    capacity: float | None = None,
    peak_step: int | None = None,
    width: int = 460,
    height: int = 220,
) -> str:
    """Memory live over the schedule, stacked by kind; ``spans`` (from, to, phase) shade the
    forward / backward steps; a capacity line and the peak's step when known."""
    left, right, top_m, bottom = 60, 10, 10, 30
    n = max([1, *(len(v) for _, v in series)])
    totals = [sum((v[i] if i < len(v) else 0) for _, v in series) for i in range(n)]
    max_y = max([1.0, *totals, capacity if capacity and capacity < 4 * max(totals) else 0.0])

    def px(i: float) -> float:
        return left + (0 if n <= 1 else i / (n - 1) * (width - left - right))

    def py(v: float) -> float:
        return top_m + (1 - v / max_y) * (height - top_m - bottom)

    body = [
        f'<rect x="{left}" y="{top_m}" width="{width - left - right}" '
        f'height="{height - top_m - bottom}" fill="none" stroke="#bbb"/>'
    ]
    shade = {"forward": "#2196f31a", "backward": "#ff70431f"}
    for a, b, phase in spans:
        body.append(
            f'<rect x="{px(a):.1f}" y="{top_m}" width="{max(1.0, px(b) - px(a)):.1f}" '
            f'height="{height - top_m - bottom}" fill="{shade.get(phase, "none")}">'
            f"<title>{phase}</title></rect>"
        )
    base = [0.0] * n
    for name, values in series:
        tops = [base[i] + (values[i] if i < len(values) else 0) for i in range(n)]
        d = "M" + " L".join(f"{px(i):.1f},{py(tops[i]):.1f}" for i in range(n))
        d += " L" + " L".join(f"{px(i):.1f},{py(base[i]):.1f}" for i in range(n - 1, -1, -1))
        body.append(
            f'<path d="{d}Z" fill="{KIND_COLOURS.get(name, "#9e9e9e")}" '
            f'fill-opacity="0.8"><title>{escape(name)}</title></path>'
        )
        base = tops
    for v in (0.0, max_y / 2, max_y):
        body.append(
            f'<text class="v" x="{left - 4}" y="{py(v) + 4:.1f}" text-anchor="end">'
            f"{fmt_bytes(v)}</text>"
        )
    if capacity and capacity <= max_y:
        body.append(
            f'<line x1="{left}" x2="{width - right}" y1="{py(capacity):.1f}" '
            f'y2="{py(capacity):.1f}" stroke="#d32f2f" stroke-dasharray="5 3"/>'
        )
    if peak_step is not None and peak_step < n:
        body.append(
            f'<line x1="{px(peak_step):.1f}" x2="{px(peak_step):.1f}" y1="{top_m}" '
            f'y2="{height - bottom}" stroke="#666" stroke-dasharray="2 2"/>'
            f'<text class="v" x="{px(peak_step) + 3:.1f}" y="{top_m + 12}">peak '
            f"{fmt_bytes(totals[peak_step])}</text>"
        )
    x = left
    for name, _ in series:  # legend under the axis
        body.append(
            f'<rect x="{x}" y="{height - 12}" width="10" height="10" '
            f'fill="{KIND_COLOURS.get(name, "#9e9e9e")}"/>'
            f'<text class="v" x="{x + 13}" y="{height - 3}">{escape(name)}</text>'
        )
        x += 20 + 7 * len(name)
    return _frame(width, height, title, source, body)
