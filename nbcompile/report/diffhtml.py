"""The diff view as static HTML (schema ``nbcompile.diff/1``, from :mod:`.diffview`): the two
compiled graphs with kernels added / removed / changed coloured, the kernel and per-line tables,
the changed cell lines. What an untrusted notebook keeps of ``c_new.diff(c_old)``."""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from typing import Any

from .charts import fmt_bytes, fmt_seconds
from .graphmodel import fmt_num
from .svg import STATUS_COLOURS, graph_svg, svg_img

__all__ = ["diff_html"]

_LABEL = {"added": "added", "removed": "removed", "changed": "changed", "same": "unchanged"}


def _delta(pair: Any, fmt: Callable[[Any], str]) -> str:
    if not pair or (pair[0] is None and pair[1] is None):
        return "–"
    b, a = pair
    if b is None or a is None:
        return f"{'–' if b is None else fmt(b)} → {'–' if a is None else fmt(a)}"
    d = a - b
    sign = "+" if d > 0 else "−" if d < 0 else "±"
    return f"{'–' if b is None else fmt(b)} → {'–' if a is None else fmt(a)} ({sign}{fmt(abs(d))})"


def _tag(status: str) -> str:
    fill, stroke = STATUS_COLOURS.get(status, STATUS_COLOURS["same"])
    return (
        f'<span data-status="{status}" style="background:{fill};border:1px solid {stroke};'
        f'padding:0 4px;border-radius:3px">{_LABEL.get(status, status)}</span>'
    )


def _graph(d: dict[str, Any], which: str) -> str:

    side = d[which]
    graph = ((side.get("report") or {}).get("graphs") or {}).get("compiled")
    if not graph:
        return "<div>no compiled program on this side</div>"
    status = {k[which]["id"]: k["status"] for k in d.get("kernels") or [] if k.get(which)}
    label = side.get("label")
    title = f"{which}: {side.get('name')}" + (f" ({label})" if label and label != which else "")
    svg = graph_svg(graph, side["report"], title=title, color="status", status=status)
    return svg_img(svg, f"compiled program, {which}", testid=f"nbc-diff-{which}")


def diff_html(d: dict[str, Any]) -> str:
    """The static diff view."""
    f = d.get("from") or {}
    counts = {k: 0 for k in _LABEL}
    for k in d.get("kernels") or []:
        counts[k["status"]] = counts.get(k["status"], 0) + 1
    head = (
        f"<b>nbcompile diff · {escape(str(d['after'].get('label')))} vs "
        f"{escape(str(d['before'].get('label')))}</b> — "
        + " · ".join(f"{_tag(k)} {n}" for k, n in counts.items())
    )
    summary = " · ".join(
        f"{escape(r['figure'])}: {_delta([r['before'], r['after']], fmt_bytes if 'bytes' in r['figure'] else fmt_seconds if 'seconds' in r['figure'] else fmt_num)}"
        + (f" ({escape(str(r['from']))})" if r.get("from") else "")
        for r in d.get("summary") or []
    )
    hunks = "".join(
        (f"<div><b>{escape(h['label'])}</b></div>" if h.get("label") else "")
        + "".join(
            f'<div style="color:#c62828">- {h["before_start"] + i}  {escape(t)}</div>'
            for i, t in enumerate(h["before"])
        )
        + "".join(
            f'<div style="color:#2e7d32">+ {h["after_start"] + i}  {escape(t)}</div>'
            for i, t in enumerate(h["after"])
        )
        for h in d.get("source_diff") or []
    )
    order = {"added": 0, "removed": 1, "changed": 2, "same": 3}
    krows = "".join(
        f"<tr><td>{_tag(k['status'])}</td><td>{escape(str((k.get('before') or {}).get('name') or '–'))}</td>"
        f"<td>{escape(str((k.get('after') or {}).get('name') or '–'))}</td>"
        f"<td>{escape('+'.join(k.get('ops') or [])[:40])}</td>"
        f"<td>{escape(' | '.join(k.get('lines') or [])[:60])}</td>"
        f"<td>{_delta([(k.get('before') or {}).get('flops'), (k.get('after') or {}).get('flops')], fmt_num)}</td>"
        f"<td>{_delta([(k.get('before') or {}).get('bytes'), (k.get('after') or {}).get('bytes')], fmt_bytes)}</td>"
        f"<td>{_delta([(k.get('before') or {}).get('seconds'), (k.get('after') or {}).get('seconds')], fmt_seconds)}</td></tr>"
        for k in sorted(d.get("kernels") or [], key=lambda k: order.get(k["status"], 4))[:200]
    )
    lrows = "".join(
        f"<tr><td>{_tag('changed' if r['change'] == 'edited' else r['change'])}</td>"
        f"<td>{escape(str(r.get('where') or ''))}</td><td><code>{escape(r['text'][:60])}</code></td>"
        f"<td>{_delta(r.get('flops'), fmt_num)}</td><td>{_delta(r.get('bytes'), fmt_bytes)}</td>"
        f"<td>{_delta(r.get('seconds'), fmt_seconds)}</td><td>{_delta(r.get('peak_bytes'), fmt_bytes)}</td></tr>"
        for r in (d.get("lines") or [])[:200]
    )
    return (
        f'<div data-testid="nbc-diff-static">{head}</div><div>{summary}</div>'
        f"<div>{_graph(d, 'before')}</div><div>{_graph(d, 'after')}</div>"
        f"<h4>Changed cell lines</h4><pre>{hunks or 'no line of the compiling cell changed'}</pre>"
        f'<h4>Kernels</h4><table data-testid="nbc-diff-kernels"><tr><th></th><th>before</th>'
        f"<th>after</th><th>ops</th><th>lines</th><th>flops ({escape(str(f.get('flops')))})</th>"
        f"<th>bytes ({escape(str(f.get('bytes')))})</th><th>time ({escape(str(f.get('seconds') or 'not profiled'))})</th></tr>"
        f'{krows}</table><h4>Per line</h4><table data-testid="nbc-diff-lines"><tr><th></th>'
        f"<th>line</th><th>source</th><th>flops (estimate)</th><th>bytes (estimate)</th>"
        f"<th>time ({escape(str(f.get('seconds') or 'not profiled'))})</th>"
        f"<th>bytes at peak ({escape(str(f.get('peak_bytes') or 'no memory map'))})</th></tr>{lrows}</table>"
        + "".join(f"<div><i>{escape(n)}</i></div>" for n in d.get("notes") or [])
    )
