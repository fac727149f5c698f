"""One report, many renderers: analysis + this run's results -> Report JSON -> text / HTML.

The Report (``docs/report-schema.md``) is the only thing the views read, so a saved notebook,
``nbcompile render`` and the live widget all show the same thing. This package is pure data and
renderers: it knows no Compilation and no widget.
"""

from __future__ import annotations

import json
from typing import Any

from ..units import format_bytes, format_count

SCHEMA = "nbcompile.report/1"

__all__ = ["SCHEMA", "build_report", "forget_memos", "text_lines", "text_summary"]


def build_report(
    analysis: dict[str, Any],
    *,
    meta: dict[str, Any],
    extras: dict[str, Any] | None = None,
    grad: dict[str, Any] | None = None,
    node_values: dict[str, dict[str, Any]] | None = None,
    module_classes: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The JSON report (docs/report-schema.md), a pure function of its inputs.

    ``analysis`` is ``Analysis.to_json()`` of the program; ``meta`` holds ``name``, ``backend``,
    ``source``, ``signature``, ``param_args``, ``options``, ``notes``, ``timings`` and
    ``cache_hit``;
    ``extras`` the results of this run (bench, ablate, debug, freeze, target, changes, profile,
    memory) as JSON-ready dicts; ``grad`` the ``value_and_grad`` program's analysis JSON;
    ``node_values`` each traced-graph node's ``--debug`` value summary by node id;
    ``module_classes`` the class of each module by its module path (``Transformer/blocks_0``:
    ``Block``), where the model library gives it.
    """
    notes = list(meta.get("notes") or [])
    notes += [n for n in analysis.get("notes", []) if n not in notes]
    timings = dict(meta.get("timings") or {})
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "name": meta["name"],
        "backend": meta["backend"],
        "source": meta["source"],
        "signature": list(meta.get("signature") or []),
        # the arguments holding the model's parameters (a layer's parameter count reads them)
        "param_args": list(meta.get("param_args") or []),
        "options": {k: _jsonable(v) for k, v in (meta.get("options") or {}).items()},
        "cache_hit": bool(meta.get("cache_hit")),
        "graphs": {"traced": None, "compiled": None},
        "fusions": [],
        "folded": [],
        "gradient": None,
        "cost": None,
        "memory": None,
        "lines": {},
        "summary": {},
        "extras": {k: _jsonable(v) for k, v in (extras or {}).items()},
        "module_classes": dict(module_classes or {}),
    }
    # the analysis JSON is shared (built once per program): containers changed here are copies
    report.update({k: v for k, v in analysis.items() if k != "notes"})
    report["graphs"] = dict(report.get("graphs") or {})
    report["notes"] = notes
    if grad is not None:
        report["gradient"] = grad.get("gradient")
        report["graphs"]["gradient"] = grad.get("graphs", {}).get("traced")
        report["graphs"]["gradient_compiled"] = grad.get("graphs", {}).get("compiled")
        report["gradient_fusions"] = grad.get("fusions", [])
        report["gradient_loops"] = grad.get("loops", [])
        # the train step's Source and Stats (the view's forward / train switch): its counts,
        # XLA's figures and, per line, its kernels and flops share (the ops as a count)
        report["gradient_summary"] = grad.get("summary")
        report["gradient_cost"] = grad.get("cost")
        report["gradient_memory"] = grad.get("memory")
        report["gradient_folded"] = grad.get("folded", [])
        report["gradient_lines"] = {
            key: {
                **{k: v for k, v in line.items() if k not in ("nodes", "kernels")},
                "ops": len(line.get("nodes") or []),
            }
            for key, line in (grad.get("lines") or {}).items()
        }
    _lean_graphs(report)
    traced = report["graphs"].get("traced")
    if node_values and traced:  # overlay on copies: the analysis JSON may be shared
        nodes = [
            {**n, "value": node_values[n["id"]]} if n["id"] in node_values else n
            for n in traced["nodes"]
        ]
        report["graphs"] = {**report["graphs"], "traced": {**traced, "nodes": nodes}}
    summary = dict(report.get("summary") or {})
    summary.update({f"{k}_seconds": v for k, v in timings.items()})
    labels = summary.get("from")
    labels = dict(labels) if isinstance(labels, dict) else ({"*": labels} if labels else {})
    labels.update({f"{k}_seconds": "measured" for k in timings})
    summary["from"] = labels
    report["summary"] = summary
    report["timings"] = timings
    own = report.get("from")
    report["from"] = {**(own if isinstance(own, dict) else {}), "timings": "measured"}
    return report


#: (graph, the fusions its kernels are) whose nodes' call paths the view can read elsewhere
_LEAN = (
    ("traced", None),
    ("gradient", None),
    ("compiled", "fusions"),
    ("gradient_compiled", "gradient_fusions"),
)


def _lean_graphs(report: dict[str, Any]) -> None:
    """Leave out of the report's graphs the call paths the view reads elsewhere (the analysis
    keeps them): a traced node's path is its group's (``group``), a fusion node's are its
    fusion's ``functions``. At GPT-2 scale these were a fifth of the displayed bytes.

    The lean graph is kept by the identity of the graph and fusions it came from (the analysis
    JSON, shared by every run of one program): a re-run's report then holds the same graph
    objects, which the display's memos (scenes, SVG, packing) know by identity."""
    for name, fusions_key in _LEAN:
        graph = report["graphs"].get(name)
        if not graph or not graph.get("nodes"):
            continue
        fusions = report.get(fusions_key) if fusions_key is not None else None
        key = (id(graph), id(fusions))
        kept = _LEANED.get(key)
        if kept is not None and kept[0] is graph and kept[1] is fusions:
            report["graphs"][name] = kept[2]
            continue
        known = {}
        if fusions_key is not None:
            known = {f.get("name"): f.get("functions") for f in report.get(fusions_key) or []}
        nodes = []
        for n in graph["nodes"]:
            calls = n.get("calls")
            redundant = isinstance(calls, str) or (
                isinstance(calls, list) and n.get("fusion") and known.get(n["fusion"]) == calls
            )
            if redundant:
                n = n.copy()  # the analysis's JSON is shared: copy, then drop (C speed)
                del n["calls"]
            nodes.append(n)
        report["graphs"][name] = lean = {**graph, "nodes": nodes}
        _LEANED[key] = (graph, fusions, lean)  # keeps both alive: their ids are not reused
        while len(_LEANED) > 16:
            del _LEANED[next(iter(_LEANED))]


_LEANED: dict[tuple[int, int], tuple[Any, Any, dict[str, Any]]] = {}


def _jsonable(value: Any) -> Any:
    if hasattr(value, "to_json"):
        return value.to_json()
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)


def text_lines(report: dict[str, Any]) -> list[str]:
    s = report.get("summary") or {}
    t = report.get("timings") or {}
    phases = {k: v for k, v in t.items() if "." not in k and not k.endswith("_call")}
    stages = ", ".join(f"{k} {v:.3f}" for k, v in phases.items())
    total = sum(v for k, v in t.items() if k in ("trace", "lower", "compile"))
    if report.get("cache_hit"):
        head = f"{report['name']}: cache hit for {report['backend']}, XLA skipped"
        lines = [head + (f" ({stages})" if stages else "")]
    else:
        lines = [f"{report['name']}: compiled for {report['backend']} in {total:.3f} s ({stages})"]
    if report.get("signature"):
        lines.append("  args: " + "; ".join(report["signature"]))
    ops = s.get("traced_ops", s.get("jaxpr_eqns", "?"))
    program = [f"{ops} traced ops"]
    if s.get("stablehlo_ops") is not None:
        program.append(f"{s['stablehlo_ops']} StableHLO ops")
    if s.get("kernels") is not None:
        program.append(f"{s['kernels']} kernels ({s.get('fusions', 0)} fusions)")
    eager = ""
    if s.get("eager_kernels"):  # op by op, as --bench runs it; a lower bound with while loops
        bound = "" if s.get("eager_kernels_exact", True) else "at least "
        eager = f"; eager (op by op) would launch {bound}{s['eager_kernels']}"
        if s.get("scalar_kernels"):  # TPU: one-element ops inside the program, not launches
            eager += (
                f" (compare with {s['kernels'] - s['scalar_kernels']} kernels besides "
                f"{s['scalar_kernels']} scalar ops)"
            )
    lines.append("  program: " + " → ".join(program) + eager)
    cost = report.get("cost") or {}
    flops = cost.get("flops") if cost else s.get("flops")
    lines.append(
        f"  folded: {s.get('folded_constants', 0)} constants; flops {format_count(flops)}"
        f"{_source(report, 'flops')}; bytes accessed {format_bytes(cost.get('bytes_accessed'))}"
        f"{_source(report, 'bytes_accessed') if cost.get('bytes_accessed') is not None else ''}"
    )
    if report.get("gradient"):
        g = report["gradient"]
        lines.append(
            f"  gradient: {g.get('forward_ops')} forward / {g.get('backward_ops')} backward ops, "
            f"residuals {format_bytes(g.get('residual_bytes'))}"
        )
    for key, extra in (report.get("extras") or {}).items():
        if isinstance(extra, dict) and extra.get("text"):
            lines.extend("  " + ln for ln in str(extra["text"]).splitlines())
        elif isinstance(extra, str):
            lines.append(f"  {key}: {extra}")
    lines.extend(f"  note: {n}" for n in report.get("notes") or [])
    return lines


def _source(report: dict[str, Any], key: str) -> str:
    """`` (XLA)`` / `` (estimate)``: where a headline figure came from (summary labels)."""
    labels = (report.get("summary") or {}).get("from")
    label = labels.get(key, labels.get("*")) if isinstance(labels, dict) else labels
    return f" ({label})" if label else ""


def text_summary(report: dict[str, Any]) -> str:
    """A few lines of plain text: what was compiled, how long it took, what came out."""
    return "\n".join(text_lines(report))


def forget_memos() -> None:
    """Drop the renderers' identity memos (packed reports, encoded graphs, laid-out scenes):
    for measurements of a first display (benchmarks), never needed for correctness."""
    from . import html, svg

    html._PACKED.clear()
    html._ENCODED.clear()
    html._TEXT.clear()
    html._PREFIXES.clear()
    html._SHARED.clear()
    svg._SCENES.clear()
    _LEANED.clear()
