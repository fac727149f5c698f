"""The Stats tab for the static fallback: the same figures as ``js/stats.js`` (funnel, kernel
cost, roofline and top kernels, memory timeline, the peak by line and module, the fits verdict,
raw XLA figures each explained in one line), as SVG images and small HTML tables."""

from __future__ import annotations

import re
from collections.abc import Callable
from html import escape
from typing import Any

from .charts import KIND_COLOURS, bar_chart, fmt_bytes, fmt_seconds, funnel, roofline, stacked_area
from .graphmodel import fmt_num, trunc
from .svg import svg_img

__all__ = ["from_of", "src", "stats_html", "val"]

_RAW_ROWS = 40  # the static page lists the first; the widget all
_RAW_HELP = [
    (r"^flops$", "floating-point operations of one call, counted by XLA's cost model"),
    (
        r"^bytes_accessed$",
        "bytes all kernels read and write in one call (cost model, not a measurement)",
    ),
    (r"^transcendentals$", "exp / log / tanh-like operations of one call"),
    (r"^optimal_seconds$", "XLA's estimate of the fastest possible call (TPU cost model)"),
    (
        r"^utilization_operand(\d+)$",
        r"how many times each element of operand \1 is read (cost model)",
    ),
    (r"^bytes_accessed_operand(\d+)$", r"bytes read from operand \1"),
    (r"^bytes_accessed_output$", "bytes written to the outputs"),
    (r"^argument_bytes$", "memory of the arguments"),
    (r"^output_bytes$", "memory of the outputs"),
    (r"^temp_bytes$", "scratch memory XLA allocates for intermediate values"),
    (r"^alias_bytes$", "outputs that reuse (alias) argument buffers"),
    (r"^generated_code_bytes$", "size of the compiled machine code"),
    (r"^host_temp_bytes$", "scratch memory on the host"),
    (r"^peak_bytes$", "most memory live at once during a call"),
    (r"^peak_bytes_is_bound$", "true when the peak is an upper bound, not exact"),
]


def from_of(obj: Any, key: str) -> str | None:
    """Where a figure comes from: the ``from`` label of the dict holding it (report schema)."""
    f = obj.get("from") if isinstance(obj, dict) else None
    if f is None:
        return None
    if isinstance(f, str):
        return f
    return f.get(key, f.get("*"))


def val(x: Any) -> Any:
    """A ``{value, source}`` figure (profile / memory JSON) or a plain number."""
    return x.get("value") if isinstance(x, dict) and "value" in x else x


def src(x: Any, default: str | None = None) -> str:
    got = x.get("source") if isinstance(x, dict) and "source" in x else default
    return got or "unknown"


def _img(svg: str, alt: str, testid: str) -> str:

    return svg_img(svg, alt, testid=testid)


def _table(headers: list[str], rows: list[list[str]], testid: str) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return (
        f'<table data-testid="{testid}" style="border-collapse:collapse;font-size:12px">'
        f"<tr>{head}</tr>{body}</table>"
    )


def _raw_help(key: str) -> str:
    for pattern, text in _RAW_HELP:
        if re.match(pattern, key):
            return re.sub(pattern, text, key)
    return ""


def _fmt_figure(key: str, v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool) or not isinstance(v, int | float):
        return escape(str(v))
    if "seconds" in key:
        return fmt_seconds(v)
    if "bytes" in key and "utilization" not in key:
        return fmt_bytes(v)
    return fmt_num(v)


def _cost_figures(report: dict[str, Any]) -> list[str]:
    fusions = report.get("fusions") or []
    summary = report.get("summary") or {}
    out = []
    fmts: list[tuple[str, Callable[[Any], str], str, str]] = [
        ("flops", fmt_num, "Kernel cost: flops", "flops"),
        ("bytes", fmt_bytes, "Kernel cost: bytes accessed", "bytes_accessed"),
    ]
    for key, fmt, title, total_key in fmts:
        top = sorted((f for f in fusions if f.get(key) is not None), key=lambda f: -f[key])[:10]
        if not top:
            continue
        sources = ", ".join(dict.fromkeys(from_of(f, key) or "unknown" for f in top))
        total = summary.get(total_key)
        note = (
            f" · program total {fmt(total)} ({from_of(summary, total_key) or 'unknown'})"
            if total is not None
            else ""
        )
        rows = [
            (
                f"{f.get('name') or f['id']} ({trunc('+'.join(f.get('ops') or []), 18)})",
                float(f[key]),
                fmt(f[key]),
            )
            for f in top
        ]
        out.append(
            _img(
                bar_chart(
                    rows,
                    title=f"{title} — top {len(top)} of {len(fusions)} kernels",
                    source=sources + note,
                ),
                title,
                f"nbc-chart-{key}",
            )
        )
    return out


def _profile_figures(p: dict[str, Any]) -> list[str]:
    peaks = p.get("peaks") or {}
    pf, pb = val(peaks.get("flops_per_s")), val(peaks.get("bytes_per_s"))
    points = [
        {
            "name": k["name"],
            "intensity": k.get("intensity"),
            "achieved": k.get("achieved_flops_per_s"),
            "share": k.get("share"),
            "bound": k.get("bound"),
        }
        for k in p.get("kernels") or []
    ]
    source = (
        f"time {p.get('source') or 'measured'}, flops/bytes {from_of(p, 'flops') or 'XLA'}"
        f", peaks {src(peaks.get('flops_per_s'))} / {src(peaks.get('bytes_per_s'))}"
    )
    out = [
        _img(
            roofline(
                points,
                pf,
                pb,
                title=f"Roofline: {peaks.get('device') or 'this device'}",
                source=source,
            ),
            "roofline",
            "nbc-chart-roofline",
        )
    ]
    rows = [
        [
            escape(k["name"]),
            fmt_seconds(k.get("seconds")),
            f"{(k.get('share') or 0) * 100:.1f}%",
            escape(str(k.get("bound") or "–")),
            escape(", ".join(loc.get("label", "") for loc in (k.get("lines") or [])[:3]) or "–"),
        ]
        for k in (p.get("kernels") or [])[:12]
    ]
    out.append(
        f"<div><b>Top kernels by time</b> ({fmt_seconds(p.get('step_seconds'))} per call, "
        f"source: {escape(str(p.get('source') or 'measured'))})"
        + _table(["kernel", "time", "share", "bound", "lines"], rows, "nbc-top-kernels-table")
        + "</div>"
    )
    return out


def _memory_figures(m: dict[str, Any]) -> list[str]:
    out = []
    tl = m.get("timeline") or {}
    by_kind = tl.get("by_kind") or {}
    kinds = [k for k in KIND_COLOURS if any(v > 0 for v in by_kind.get(k) or [])]
    if kinds:
        spans: list[list[Any]] = []
        for i, st in enumerate(tl.get("steps") or []):
            phase = st.get("phase")
            if phase not in ("forward", "backward"):
                continue
            if spans and spans[-1][2] == phase and spans[-1][1] == i:
                spans[-1][1] = i + 1
            else:
                spans.append([i, i + 1, phase])
        svg = stacked_area(
            [(k, by_kind[k]) for k in kinds],
            title=f"Memory over the schedule: peak {fmt_bytes(val(m.get('peak_bytes')))}",
            source=f"{tl.get('source') or src(m.get('peak_bytes'))} (buffer live ranges)",
            spans=[tuple(s) for s in spans],
            capacity=val(m.get("capacity_bytes")),
            peak_step=m.get("peak_step"),
        )
        out.append(_img(svg, "memory timeline", "nbc-chart-memory"))
    lines = sorted(m.get("by_line") or [], key=lambda r: -(val(r.get("bytes")) or 0))[:10]
    if lines:
        rows = [
            (r.get("label", ""), float(val(r.get("bytes")) or 0), fmt_bytes(val(r.get("bytes"))))
            for r in lines
        ]
        out.append(
            _img(
                bar_chart(
                    rows,
                    title="Live at the peak, by line",
                    source=src(lines[0], src(m.get("peak_bytes"))),
                ),
                "bytes at peak by line",
                "nbc-chart-peak-lines",
            )
        )
    mods = m.get("by_module") or {}
    pairs = (
        [(r.get("module") or r.get("label"), val(r.get("bytes"))) for r in mods]
        if isinstance(mods, list)
        else [(k, val(v)) for k, v in mods.items()]
    )
    if pairs:
        rows = [
            (str(k), float(v or 0), fmt_bytes(v))
            for k, v in sorted(pairs, key=lambda kv: -(kv[1] or 0))[:10]
        ]
        out.append(
            _img(
                bar_chart(
                    rows, title="Live at the peak, by module", source=src(m.get("peak_bytes"))
                ),
                "bytes at peak by module",
                "nbc-chart-peak-modules",
            )
        )
    fits, cap = val(m.get("fits")), val(m.get("capacity_bytes"))
    word = {True: "fits", False: "does not fit"}.get(fits, "fit not decided")
    cap_text = (
        f"{fmt_bytes(cap)} ({src(m.get('capacity_bytes'))})"
        if cap is not None
        else escape(str(m.get("capacity_label") or "capacity unknown"))
    )
    out.append(
        f'<div data-testid="nbc-fits" data-fits="{str(fits).lower()}"><b>Will it fit?</b> '
        f"{word}: peak {fmt_bytes(val(m.get('peak_bytes')))}"
        f"{' of ' if cap is not None else ' · '}{cap_text} "
        f"(source: peak {src(m.get('peak_bytes'))})</div>"
    )
    return out


def _raw(report: dict[str, Any]) -> str:
    rows = []
    for what in ("cost", "memory"):
        obj = report.get(what) or {}
        for k, v in obj.items():
            if k != "from":
                rows.append(
                    [
                        f"{what}.{escape(k)}",
                        _fmt_figure(k, v),
                        escape(from_of(obj, k) or "–"),
                        escape(_raw_help(k)),
                    ]
                )
    more = (
        f"<div>… {len(rows) - _RAW_ROWS} more in the live view</div>"
        if len(rows) > _RAW_ROWS
        else ""
    )
    table = (
        _table(["figure", "value", "source", "what it is"], rows[:_RAW_ROWS], "nbc-raw-table")
        + more
        if rows
        else "XLA reported no cost or memory analysis for this program."
    )
    return f'<details data-testid="nbc-raw"><summary>raw XLA figures ({len(rows)})</summary>{table}</details>'


def stats_html(report: dict[str, Any]) -> str:
    """The Stats tab of the static fallback (HTML with SVG images)."""
    s = report.get("summary") or {}
    stages = [
        ("traced ops (jaxpr)", s.get("jaxpr_eqns")),
        ("StableHLO ops", s.get("stablehlo_ops")),
        ("HLO ops before optimisation", s.get("hlo_ops_before")),
        ("HLO ops after optimisation", s.get("hlo_ops_after")),
        ("kernels that run", s.get("kernels")),
    ]
    eager = s.get("eager_kernels")
    note = f"{fmt_num(s.get('fusions'))} fusions" + (
        f" · op by op (eager) would launch {'' if s.get('eager_kernels_exact', True) else 'at least '}"
        f"{fmt_num(eager)}"
        if eager
        else ""
    )
    parts = [
        _img(
            funnel(
                stages,
                title="From traced ops to kernels",
                source="exact counts of the program · " + note,
            ),
            "op counts",
            "nbc-chart-funnel",
        )
    ]
    parts += _cost_figures(report)
    extras = report.get("extras") or {}
    if extras.get("profile"):
        parts.append("<h4>Where the time goes (--profile)</h4>")
        parts += _profile_figures(extras["profile"])
    if extras.get("memory"):
        parts.append("<h4>Where the bytes go (--memory)</h4>")
        parts += _memory_figures(extras["memory"])
    parts.append(_raw(report))
    for key, value in extras.items():
        if key in ("profile", "memory", "changes"):
            continue
        text = (
            value.get("text")
            if isinstance(value, dict)
            else value
            if isinstance(value, str)
            else None
        )
        if text:
            parts.append(
                f"<details><summary>{escape(key)}</summary><pre>{escape(str(text))}</pre></details>"
            )
    return "".join(f"<div>{p}</div>" for p in parts)
