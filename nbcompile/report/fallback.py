"""The static fallback: every tab of the view as plain HTML and SVG images, no script.

JupyterLab strips scripts and inline SVG from untrusted (downloaded) notebooks but keeps
``<details>``, tables and ``<img src="data:image/svg+xml;base64,...">``: each tab is a
``<details>`` section (the Graph tab open), each picture an image drawn from the same scene as
the widget (:mod:`.svg`) or as its charts (:mod:`.statsfig`).
"""

from __future__ import annotations

from html import escape
from typing import Any

from .charts import fmt_bytes, fmt_seconds
from .diffhtml import diff_html
from .graphmodel import fmt_num
from .passesfig import passes_html
from .statsfig import from_of, src, stats_html, val
from .svg import graph_svg, svg_img

__all__ = ["TAB_LABELS", "fallback_html", "source_table", "time_heat"]

_WHOLE = 80  # a cell this long is shown whole; a longer one around its program's lines
TAB_LABELS = {
    "graph": "Graph",
    "compiled": "Compiled",
    "passes": "Passes",
    "source": "Source",
    "gradient": "Gradient",
    "stats": "Stats",
    "diff": "Diff",
}


def _img(svg: str, alt: str, testid: str) -> str:

    return svg_img(svg, alt, testid=testid)


def time_heat(report: dict[str, Any], graph: dict[str, Any] | None) -> dict[str, float] | None:
    """Compiled-graph node id -> share of measured time (relative to the slowest kernel)."""
    p = (report.get("extras") or {}).get("profile")
    if not p or not graph:
        return None
    share = {k["name"]: k.get("share") or 0.0 for k in p.get("kernels") or []}
    top = max([1e-12, *share.values()])
    out = {
        n["id"]: share[n["label"]] / top
        for n in graph.get("nodes") or []
        if n.get("label") in share
    }
    return out or None


def _section(tab: str, body: str, *, open_: bool = False) -> str:
    return (
        f'<details data-nbc-tab="{tab}"{" open" if open_ else ""}>'
        f"<summary><b>{TAB_LABELS[tab]}</b></summary>{body}</details>"
    )


def _line_metrics(report: dict[str, Any]) -> list[tuple[str, Any]]:
    """(column title, function (key, prefix, n) -> text) for each heat measure the report has."""
    info = report.get("lines") or {}
    cols: list[tuple[str, Any]] = [
        (
            "flops share (estimate)",
            lambda key, _p, _n: (
                f"{info[key]['cost_share'] * 100:.0f}%"
                if info.get(key, {}).get("cost_share") is not None
                else ""
            ),
        )
    ]
    extras = report.get("extras") or {}
    p = extras.get("profile")
    if p:
        by_label = {r["label"]: r["seconds"] for r in p.get("by_line") or []}
        by_cell = p.get("by_cell_line") or {}

        def t(key: str, prefix: str, n: int) -> str:
            v = by_cell.get(str(n)) if prefix == "" else by_label.get(key)
            return "" if v is None else fmt_seconds(v)

        cols.append((f"time ({p.get('source') or 'measured'})", t))
    m = extras.get("memory")
    if m:
        by_label_b = {r["label"]: val(r.get("bytes")) for r in m.get("by_line") or []}
        by_cell_b = m.get("by_cell_line") or {}

        def b(key: str, prefix: str, n: int) -> str:
            v = val(by_cell_b.get(str(n))) if prefix == "" else by_label_b.get(key)
            return "" if v is None else fmt_bytes(v)

        cols.append((f"bytes at peak ({src(m.get('peak_bytes'))})", b))
    return cols


def source_table(report: dict[str, Any]) -> str:
    """Every contributing cell's lines (and the annotated lines of user files: report["sources"]),
    with each heat measure (flops share, time, bytes at peak) and the kernels each became."""
    info = report.get("lines") or {}
    sources = [("", "", (report.get("source") or {}).get("lines") or [], True)]
    sources += [
        (
            s.get("label", ""),
            s.get("key_prefix", ""),
            s.get("lines") or [],
            s.get("cell") is not None,
        )
        for s in report.get("sources") or []
    ]
    if not sources[0][2] and len(sources) == 1:
        return ""
    cols = _line_metrics(report)
    rows = []
    for label, prefix, lines, whole in sources:
        if label:
            rows.append(
                f'<tr data-testid="nbc-source-head"><th colspan="{3 + len(cols)}">'
                f"{escape(label)}</th></tr>"
            )
        # a long cell (or a file compiled as a script): the program's lines and one either side
        near = (
            None
            if whole and len(lines) <= _WHOLE
            else {
                n + d
                for n in range(1, len(lines) + 1)
                if info.get(f"{prefix}{n}")
                for d in (-1, 0, 1)
            }
        )
        gap = False
        for i, text in enumerate(lines, start=1):
            key = f"{prefix}{i}"
            entry = info.get(key) or {}
            if near is not None and i not in near:
                if not gap:
                    rows.append(f'<tr><td colspan="{3 + len(cols)}">…</td></tr>')
                gap = True
                continue
            gap = False
            fusions = entry.get("fusions") or []
            ann = ", ".join(fusions[:4]) + (f" +{len(fusions) - 4}" if len(fusions) > 4 else "")
            cells = "".join(f"<td>{escape(f(key, prefix, i))}</td>" for _, f in cols)
            rows.append(
                f'<tr data-line="{escape(key)}"><td>{i}</td>{cells}'
                f"<td><code>{escape(text)}</code></td><td>{escape(ann)}</td></tr>"
            )
    head = "".join(f"<th>{escape(t)}</th>" for t, _ in cols)
    return (
        '<table data-testid="nbc-source-table"><tr><th>line</th>'
        + head
        + "<th>source</th><th>kernels</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def _gradient(report: dict[str, Any]) -> str:
    g = report.get("gradient") or {}
    kernels = " · ".join(f"{k} {v}" for k, v in (g.get("kernels") or {}).items())
    head = (
        f"<div>{fmt_num(g.get('forward_ops'))} forward / {fmt_num(g.get('backward_ops'))} "
        f"backward ops; kernels {escape(kernels)}; residuals "
        f"{fmt_bytes(g.get('residual_bytes'))} ({from_of(g, 'residual_bytes') or 'estimate'})"
        " · colours: forward blue, backward orange, mixed purple</div>"
    )
    graph = (report.get("graphs") or {}).get("gradient")
    if not graph:
        return head
    svg = graph_svg(
        graph,
        report,
        title=f"{report.get('name')}: gradient (value_and_grad)",
        color="phase",
    )
    return head + _img(svg, f"gradient program of {report.get('name')}", "nbc-graph-gradient")


def fusion_where(f: dict[str, Any]) -> str:
    """The user's call or module a kernel came from (``fusionWhere``): its first call path,
    else its first module path, with how many more."""
    paths = list(f.get("functions") or []) or list(f.get("modules") or [])
    if not paths:
        return "–"
    return str(paths[0]) + (f" +{len(paths) - 1}" if len(paths) > 1 else "")


def _compiled(report: dict[str, Any], graph: dict[str, Any]) -> str:
    # with --grad the widget's Compiled tab draws the train step's kernels: so does this
    # (unless the forward program was profiled: then its kernels, coloured by measured time)
    heat = time_heat(report, graph)
    step = None if heat else (report.get("graphs") or {}).get("gradient_compiled")
    graph = step or graph
    what = "train step (value_and_grad), compiled" if step else "compiled"
    svg = graph_svg(
        graph,
        report,
        title=f"{report.get('name')}: {what} (XLA kernels)",
        color="heat" if heat else "kind",
        heat=heat,
    )
    legend = ""
    if heat:
        source = ((report.get("extras") or {}).get("profile") or {}).get("source") or "measured"
        legend = (
            f"<div>kernels coloured by measured time, pale to red (source: {escape(source)})</div>"
        )
    every = report.get("gradient_fusions" if step else "fusions") or []
    fusions = sorted(every, key=lambda f: -(f.get("flops") or 0))[:20]
    fsrc = from_of(fusions[0], "flops") if fusions else None
    rows = "".join(
        f"<tr><td>{escape(str(f.get('name') or f['id']))}</td><td>{escape(fusion_where(f))}</td>"
        f"<td>{escape(str(f.get('kind')))}</td>"
        f"<td>{escape(', '.join(f.get('ops') or [])[:60])}</td><td>{fmt_num(f.get('flops'))}</td>"
        f"<td>{fmt_bytes(f.get('bytes'))}</td></tr>"
        for f in fusions
    )
    table = (
        (
            f"<table><tr><th>fusion</th><th>call / module</th><th>kind</th><th>ops</th>"
            f"<th>flops ({fsrc})</th><th>bytes ({fsrc})</th></tr>{rows}</table>"
        )
        if fusions
        else ""
    )
    return (
        legend
        + _img(svg, f"compiled program of {report.get('name')}", "nbc-graph-compiled")
        + table
    )


def fallback_html(report: dict[str, Any]) -> str:
    """The whole view as static HTML: a head line, notes, then one section per tab."""
    s = report.get("summary") or {}
    name = escape(str(report.get("name")))
    flops_from = from_of(s, "flops") if s.get("flops") is not None else None
    head = (
        f"<b>nbcompile · {name} · {escape(str(report.get('backend')))}</b> — "
        f"{fmt_num(s.get('jaxpr_eqns'))} traced ops → {fmt_num(s.get('kernels'))} kernels "
        f"({fmt_num(s.get('fusions'))} fusions), {fmt_num(s.get('flops'))} flops"
        f"{f' ({flops_from})' if flops_from else ''}, "
        f"compile {fmt_seconds(s.get('compile_seconds'))} (measured)"
    )
    parts = [f"<div>{head}</div>"]
    parts += [f"<div><i>{escape(str(n))}</i></div>" for n in report.get("notes") or []]
    changes = (report.get("extras") or {}).get("changes")
    if changes:
        items = changes.get("items") or str(changes.get("text") or "").splitlines()
        parts.append(
            '<div data-testid="nbc-changes">' + "<br>".join(escape(i) for i in items) + "</div>"
        )
    graphs = report.get("graphs") or {}
    traced = graphs.get("traced")
    if traced:
        svg = graph_svg(traced, report, title=f"{report.get('name')}: traced program")
        parts.append(
            _section(
                "graph",
                _img(svg, f"traced program of {report.get('name')}", "nbc-graph-traced"),
                open_=True,
            )
        )
    if graphs.get("compiled"):
        parts.append(_section("compiled", _compiled(report, graphs["compiled"])))
    if (report.get("extras") or {}).get("passes"):  # --passes, or c.passes was read
        parts.append(_section("passes", passes_html(report)))
    table = source_table(report)
    if table:
        parts.append(_section("source", table))
    if report.get("gradient"):
        parts.append(_section("gradient", _gradient(report)))
    parts.append(_section("stats", stats_html(report)))
    if changes and changes.get("diff"):
        parts.append(_section("diff", diff_html(changes["diff"])))
    return "".join(parts)
