"""The Passes tab of the static fallback: the pass chart, the table of the passes that changed
the program and the code of the costliest kernels (``extras["passes"]``, nbcompile/report/
metal.py). ``js/passes.js`` draws the same chart in the widget."""

from __future__ import annotations

from html import escape
from typing import Any

from .graphmodel import fmt_num, trunc
from .svg import svg_img

__all__ = ["LOCATION_COLOURS", "STATIC_KERNELS", "passes_chart", "passes_html"]

#: kernels whose code the static picture shows
STATIC_KERNELS = 5
#: instructions of one kernel the static picture shows
STATIC_LINES = 150
#: one colour per source location of a kernel (js/passes.js uses the same)
LOCATION_COLOURS = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#9467bd",
    "#ff7f0e",
    "#17becf",
    "#8c564b",
    "#e377c2",
)
_STYLE = (
    "<style>text{font-family:system-ui,sans-serif;font-size:10px;fill:#333}"
    "text.h{font-size:12px;font-weight:bold}text.s{fill:#666}</style>"
)


def step_label(step: dict[str, Any]) -> str:
    """``14 HLO_passes_after_layout_assignment/fusion``."""
    return f"{step['index']} {step['pipeline']}/{step['name']}"


def pipeline_runs(steps: list[dict[str, Any]]) -> list[tuple[str, int, int]]:
    """(pipeline, first, last) of each run of consecutive steps in one pipeline."""
    runs: list[tuple[str, int, int]] = []
    for i, s in enumerate(steps):
        if runs and runs[-1][0] == s["pipeline"]:
            runs[-1] = (s["pipeline"], runs[-1][1], i)
        else:
            runs.append((s["pipeline"], i, i))
    return runs


def passes_chart(p: dict[str, Any], selected: int | None = None) -> str:
    """Instructions and fusions after each step that changed the program, as an SVG: one
    column per step, instructions a blue bar and fusions an orange bar (each on its own scale),
    the steps that formed kernels marked. Each column is ``<g data-kind="step" data-name=...>``."""
    steps = p.get("steps") or []
    col, left, top, plot = 22, 44, 24, 120
    width = max(680, left + col * len(steps) + 16)
    most_i = max([1, *(s["instructions"] for s in steps)])
    most_f = max([1, *(s["fusions"] for s in steps)])
    body = [
        f'<text class="h" x="8" y="14">XLA passes that changed {escape(str(p.get("module")))}'
        f" ({len(steps)} of {p.get('total_steps')} steps)</text>",
        f'<text x="4" y="{top + 10}">{fmt_num(most_i)}</text>',
        f'<text x="4" y="{top + plot}">0</text>',
    ]
    for i, s in enumerate(steps):
        x = left + i * col
        hi = plot * s["instructions"] / most_i
        hf = plot * s["fusions"] / most_f
        mark = (
            f'<rect x="{x}" y="{top}" width="{col - 2}" height="{plot}" fill="#fff3c4"/>'
            if s.get("formed")
            else ""
        )
        sel = (
            f'<rect x="{x - 1}" y="{top - 2}" width="{col}" height="{plot + 4}" fill="none" '
            'stroke="#333" stroke-width="1.5"/>'
            if selected == s["index"]
            else ""
        )
        tip = f"{step_label(s)}: {s['instructions']} instructions, {s['fusions']} fusions" + (
            f"; kernels formed: {', '.join(s['formed'][:6])}" if s.get("formed") else ""
        )
        body.append(
            f'<g data-kind="step" data-name="{escape(step_label(s))}"><title>{escape(tip)}</title>'
            f"{mark}{sel}"
            f'<rect x="{x + 1}" y="{top + plot - hi:.1f}" width="9" height="{max(hi, 1):.1f}" '
            'fill="#4a90d9"/>'
            f'<rect x="{x + 10}" y="{top + plot - hf:.1f}" width="9" height="{max(hf, 1):.1f}" '
            'fill="#ec8f3d"/>'
            f'<text x="{x + 10}" y="{top + plot + 12}" text-anchor="middle">{s["index"]}</text></g>'
        )
    for pipeline, first, last in pipeline_runs(steps):
        x, w = left + first * col, (last - first + 1) * col - 2
        body.append(
            f'<g data-kind="pipeline" data-name="{escape(pipeline)}"><title>pipeline '
            f'{escape(pipeline)}</title><rect x="{x}" y="{top + plot + 17}" width="{w}" '
            f'height="14" rx="2" fill="#eee" stroke="#bbb" stroke-width="0.5"/>'
            f'<text x="{x + 2}" y="{top + plot + 28}">{escape(trunc(pipeline, max(1, w // 6)))}'
            "</text></g>"
        )
    total = top + plot + 62
    body.append(
        f'<text class="s" x="8" y="{top + plot + 44}">blue: instructions (max {fmt_num(most_i)}) · '
        f"orange: fusions (max {fmt_num(most_f)}) · yellow: kernels formed · x: XLA's step</text>"
        f'<text class="s" x="8" y="{total - 6}">source: {escape(str(p.get("source")))}</text>'
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{total}" '
        f'viewBox="0 0 {width} {total}" data-testid="nbc-passes-chart">{_STYLE}'
        f'<rect width="{width}" height="{total}" fill="#fff" stroke="#ccc"/>{"".join(body)}</svg>'
    )


def _delta(step: dict[str, Any]) -> str:
    added = [f"+{n} {op}" for op, n in (step.get("added") or {}).items()]
    removed = [f"−{n} {op}" for op, n in (step.get("removed") or {}).items()]
    return " ".join(added + removed)


def _formed(step: dict[str, Any]) -> str:
    names = step.get("formed") or []
    more = (step.get("formed_total") or len(names)) - len(names)
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


def _table(p: dict[str, Any]) -> str:
    rows = "".join(
        f'<tr data-step="{s["index"]}"><td>{s["index"]}</td><td>{escape(s["pipeline"])}</td>'
        f"<td>{escape(s['name'])}</td><td>{s['instructions']}</td><td>{s['fusions']}</td>"
        f"<td>{escape(trunc(_delta(s), 90))}</td>"
        f"<td>{escape(_formed(s))}</td></tr>"
        for s in p.get("steps") or []
    )
    return (
        '<table data-testid="nbc-passes-table"><tr><th>step</th><th>pipeline</th><th>pass</th>'
        "<th>instructions</th><th>fusions</th><th>added / removed</th><th>kernels formed</th>"
        f"</tr>{rows}</table>"
    )


def _code(k: dict[str, Any]) -> str:
    """One kernel's instructions, each coloured by its first source location."""
    locations = k.get("locations") or []
    colour = {i: LOCATION_COLOURS[i % len(LOCATION_COLOURS)] for i in range(len(locations))}
    lines = k.get("asm") or []
    shown = min(len(lines), STATIC_LINES)
    out = []
    for start, count, ids in k.get("at") or []:
        if start >= shown:
            break
        c = colour.get(ids[0], "#999") if ids else "#999"
        text = "\n".join(lines[start : min(start + count, shown)])
        out.append(
            f'<span data-loc="{",".join(map(str, ids))}" style="border-left:4px solid {c};'
            f'padding-left:4px;display:block">{escape(text)}</span>'
        )
    legend = " · ".join(
        f'<span style="color:{colour[i]}">■</span> {escape(loc["label"])}'
        for i, loc in enumerate(locations)
    )
    cut = len(lines) < k.get("instructions", 0) or shown < len(lines)
    width = f"{k['vector_width']}-bit vectors" if k.get("vector_width") else "no vector registers"
    head = (
        f"<b>{escape(k['name'])}</b>: {k.get('instructions')} {escape(str(k.get('isa')))} "
        f"instructions, {width}"
        + (f"; the code of {escape(k['shared_with'])}" if k.get("shared_with") else "")
        + (
            f"; {escape(k['library'])} runs it: XLA's own code for its ops, compiled with "
            f"{escape(k['library'])} off — not what runs"
            if k.get("library")
            else ""
        )
    )
    return (
        f'<details data-testid="nbc-static-kernel-code" data-kernel="{escape(k["name"])}">'
        f"<summary>{head}</summary><div>lines: {legend or 'none known'}</div>"
        f"<div><i>{escape(str(k.get('mapping') or ''))}</i></div>"
        '<pre style="font-size:11px;max-height:24em;overflow:auto">'
        + "".join(out)
        + "</pre>"
        + (
            f"<div>first {shown} of {k.get('instructions')} instructions: "
            f"c.kernel_code({k['name']!r}).asm has them all</div>"
            if cut
            else ""
        )
        + f"<div>source: {escape(str(k.get('source')))}</div></details>"
    )


def passes_html(report: dict[str, Any]) -> str:
    """The Passes section's body: chart, table, the five costliest kernels' code."""

    p = (report.get("extras") or {}).get("passes") or {}
    parts = []
    if p.get("steps"):
        parts.append(
            svg_img(passes_chart(p), f"XLA passes of {report.get('name')}", testid="nbc-passes-img")
        )
        parts.append(_table(p))
        parts.append(
            "<div>the diff of each step: <code>c.passes.diff(step)</code>; source: "
            f"{escape(str(p.get('source')))}</div>"
        )
    codes = (p.get("kernel_code") or [])[:STATIC_KERNELS]
    if codes:
        parts.append(f"<h4>Code of the {len(codes)} costliest kernels</h4>")
        parts.extend(_code(k) for k in codes)
    return "".join(parts)
