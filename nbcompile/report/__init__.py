"""One report, many renderers: Compilation -> Report JSON -> text / HTML / widget.

The Report (``docs/report-schema.md``) is the only thing the views read, so a saved notebook,
``nbcompile render`` and the live widget all show the same thing.
"""

from __future__ import annotations

import json
from typing import Any

SCHEMA = "nbcompile.report/1"

__all__ = ["SCHEMA", "build_report", "mimebundle", "text_summary"]


def build_report(c: Any) -> dict[str, Any]:
    """The JSON-serialisable report of a :class:`~nbcompile.Compilation`."""
    analysis = c.analysis.to_json()
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "name": c.name,
        "backend": c.backend,
        "source": c.source.to_json(),
        "signature": list(c.signature),
        "options": {k: _jsonable(v) for k, v in c.options.items()},
        "graphs": {"traced": None, "compiled": None},
        "fusions": [], "folded": [], "gradient": None, "cost": None, "memory": None,
        "lines": {}, "summary": {},
        "notes": list(c.notes),
        "extras": {k: _jsonable(v) for k, v in c.extras.items()},
    }
    report.update({k: v for k, v in analysis.items() if k != "notes"})
    report["notes"] = list(c.notes) + [n for n in analysis.get("notes", []) if n not in c.notes]
    if c.grad is not None:
        g = c.grad.analysis.to_json()
        report["gradient"] = g.get("gradient")
        report["graphs"]["gradient"] = g.get("graphs", {}).get("traced")
        report["graphs"]["gradient_compiled"] = g.get("graphs", {}).get("compiled")
        report["gradient_fusions"] = g.get("fusions", [])
    debug = getattr(c, "debug", None)
    if debug is not None and report["graphs"].get("traced"):
        _overlay_debug_values(c, debug, report["graphs"]["traced"])
    summary = dict(report.get("summary") or {})
    summary.update({f"{k}_seconds": v for k, v in c.timings.items()})
    report["summary"] = summary
    report["timings"] = c.timings
    return report


def _overlay_debug_values(c: Any, debug: Any, graph: dict[str, Any]) -> None:
    """Put each equation's --debug value summary on its traced-graph node (``node["value"]``),
    so clicking a node in the view shows the value it computed (fused away or not)."""
    from ..debug import equation_ids

    eqn_nodes = c.analysis.traced_graph.eqn_nodes
    by_node = {n["id"]: n for n in graph["nodes"]}
    for debug_id, eqn in equation_ids(c.jaxpr):
        summary = debug.summaries.get(debug_id)
        node = by_node.get(eqn_nodes.get(id(eqn), ""))
        if summary is not None and node is not None:
            node["value"] = {"id": debug_id, **(summary.get("outputs") or [{}])[0]}
            if debug.nan_at and debug.nan_at.get("id") == debug_id:
                node["value"]["first_nan"] = True


def _jsonable(value: Any) -> Any:
    if hasattr(value, "to_json"):
        return value.to_json()
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)


def _num(x: Any) -> str:
    if x is None:
        return "not reported"
    if isinstance(x, float) and not x.is_integer():
        return f"{x:.3g}"
    x = float(x)
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.0f}"


def _bytes(n: Any) -> str:
    if n is None:
        return "not reported"
    n = float(n)
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def text_lines(report: dict[str, Any]) -> list[str]:
    s = report.get("summary") or {}
    t = report.get("timings") or {}
    stages = ", ".join(f"{k} {v:.3f}" for k, v in t.items())
    total = sum(v for k, v in t.items() if k in ("trace", "lower", "compile"))
    lines = [f"{report['name']}: compiled for {report['backend']} in {total:.3f} s ({stages})"]
    if report.get("signature"):
        lines.append("  args: " + "; ".join(report["signature"]))
    program = [f"{s.get('jaxpr_eqns', '?')} jaxpr eqns"]
    if s.get("stablehlo_ops") is not None:
        program.append(f"{s['stablehlo_ops']} StableHLO ops")
    if s.get("kernels") is not None:
        program.append(f"{s['kernels']} kernels ({s.get('fusions', 0)} fusions)")
    eager = f"; eager would launch {s['eager_kernels']}" if s.get("eager_kernels") else ""
    lines.append("  program: " + " → ".join(program) + eager)
    cost = report.get("cost") or {}
    lines.append(
        f"  folded: {s.get('folded_constants', 0)} constants; flops {_num(cost.get('flops'))}; "
        f"bytes accessed {_bytes(cost.get('bytes_accessed'))}"
    )
    if report.get("gradient"):
        g = report["gradient"]
        lines.append(
            f"  gradient: {g.get('forward_ops')} forward / {g.get('backward_ops')} backward ops, "
            f"residuals {_bytes(g.get('residual_bytes'))}"
        )
    for key, extra in (report.get("extras") or {}).items():
        if isinstance(extra, dict) and extra.get("text"):
            lines.extend("  " + ln for ln in str(extra["text"]).splitlines())
        elif isinstance(extra, str):
            lines.append(f"  {key}: {extra}")
    lines.extend(f"  note: {n}" for n in report.get("notes") or [])
    return lines


def text_summary(report: dict[str, Any]) -> str:
    """A few lines of plain text: what was compiled, how long it took, what came out."""
    return "\n".join(text_lines(report))


_SCRIPT_SENT = False


def mimebundle(c: Any) -> dict[str, Any]:
    """text/plain + self-contained HTML fallback + the widget view where a kernel runs.

    The fallback's interactive renderer (~43 KB) is sent with the first output of the kernel
    only; later outputs use the one the page already has (and always keep the static SVG).
    """
    global _SCRIPT_SENT
    from .html import render_html

    report = c.report()
    key = (id(report), not _SCRIPT_SENT)
    cached = c.__dict__.get("_bundle")
    if cached is not None and cached[0] == key:
        return dict(cached[1])
    bundle: dict[str, Any] = {
        "text/plain": text_summary(report),
        "text/html": render_html(report, include_script=not _SCRIPT_SENT),
    }
    _SCRIPT_SENT = True
    try:
        from ..widgets import CompilationView
    except ImportError:
        return bundle
    view = CompilationView(report)
    widget_bundle = view._repr_mimebundle_()
    if isinstance(widget_bundle, tuple):
        widget_bundle = widget_bundle[0]
    for mime, value in (widget_bundle or {}).items():
        if mime.startswith("application/vnd.jupyter.widget"):
            bundle[mime] = value
    c._view = view  # keep the model alive with the Compilation
    c.__dict__["_bundle"] = (key, dict(bundle))
    return bundle
