"""The diff view's data: two reports -> one JSON (schema ``nbcompile.diff/1``), pure.

Kernels (the compiled graphs' nodes that run code) are matched across the two compilations by
what they are, not by XLA's names (``fusion.3`` may become ``fusion.4``): kind, member ops,
module paths and the *text* of the source lines they come from (so inserting a line above does
not make every later kernel "changed"). What is left on one side is added / removed; a kernel
matched only by kind, ops and modules (its line was edited) or whose flops / bytes / shape moved
is changed. Per-line figures (flops and bytes split evenly over a kernel's lines, measured time,
bytes at the memory peak) are matched by line text too. ``docs/report-schema.md`` has the format.
"""

from __future__ import annotations

import difflib
from collections import defaultdict
from typing import Any

__all__ = ["DIFF_SCHEMA", "diff_report"]

DIFF_SCHEMA = "nbcompile.diff/1"
_NOT_KERNELS = {"param", "const", "output"}


def _texts(report: dict[str, Any]) -> dict[str, str]:
    """Line key (as in report["lines"]) -> the line's text, for every source of the report."""
    out = {str(i): t for i, t in enumerate((report.get("source") or {}).get("lines") or [], 1)}
    for s in report.get("sources") or []:
        prefix = s.get("key_prefix", "")
        out.update({f"{prefix}{i}": t for i, t in enumerate(s.get("lines") or [], 1)})
    return out


def _val(x: Any) -> Any:
    return x.get("value") if isinstance(x, dict) and "value" in x else x


def _kernels(report: dict[str, Any]) -> list[dict[str, Any]]:
    graph = (report.get("graphs") or {}).get("compiled") or {}
    fusions = {f["id"]: f for f in report.get("fusions") or []}
    texts = _texts(report)
    profile = (report.get("extras") or {}).get("profile") or {}
    seconds = {k["name"]: k.get("seconds") for k in profile.get("kernels") or []}
    out = []
    for n in graph.get("nodes") or []:
        if n.get("kind") in _NOT_KERNELS:
            continue
        f = fusions.get(n.get("fusion") or "")
        keys = (
            [str(x) for x in f.get("lines") or []]
            + [loc["label"] for loc in f.get("locations") or [] if loc.get("label")]
            if f
            else []
        )
        if not f:
            keys = (
                [str(n["line"])]
                if n.get("line") is not None
                else [n["loc"]]
                if n.get("loc")
                else []
            )
        line_texts = sorted({texts[k].strip() for k in keys if k in texts})
        ops = sorted(f.get("ops") or []) if f else [str(n.get("op"))]
        modules = sorted(f.get("modules") or []) if f else ([n["path"]] if n.get("path") else [])
        out.append(
            {
                "id": n["id"],
                "name": n.get("label") or n["id"],
                "kind": (f or {}).get("kind") or n.get("op"),
                "ops": ops,
                "modules": modules,
                "texts": line_texts,
                "where": keys,
                "flops": (f or n).get("flops"),
                "bytes": (f or n).get("bytes"),
                "shape": n.get("shape"),
                "seconds": seconds.get(n.get("label") or ""),
            }
        )
    return out


def _side(k: dict[str, Any]) -> dict[str, Any]:
    return {x: k[x] for x in ("id", "name", "flops", "bytes", "shape", "seconds")}


def _match(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    left_b, left_a = list(range(len(before))), list(range(len(after)))
    for strict in (True, False):  # by line text first, then by what the kernel is

        def key(k: dict[str, Any], strict: bool = strict) -> tuple:
            base = (k["kind"], tuple(k["ops"]), tuple(k["modules"]))
            return (*base, tuple(k["texts"])) if strict else base

        pool: dict[tuple, list[int]] = defaultdict(list)
        for i in left_b:
            pool[key(before[i])].append(i)
        rest_a = []
        for j in left_a:
            cands = pool.get(key(after[j]))
            if not cands:
                rest_a.append(j)
                continue
            i = cands.pop(0)
            b, a = before[i], after[j]
            moved = any(b[x] != a[x] for x in ("flops", "bytes", "shape")) or not strict
            rows.append({"status": "changed" if moved else "same", "b": b, "a": a})
        used = {id(r["b"]) for r in rows}
        left_b = [i for i in left_b if id(before[i]) not in used]
        left_a = rest_a
    rows += [{"status": "removed", "b": before[i], "a": None} for i in left_b]
    rows += [{"status": "added", "b": None, "a": after[j]} for j in left_a]
    out = []
    for r in rows:
        k = r["a"] or r["b"]
        out.append(
            {
                "status": r["status"],
                "before": _side(r["b"]) if r["b"] else None,
                "after": _side(r["a"]) if r["a"] else None,
                "kind": k["kind"],
                "ops": k["ops"],
                "modules": k["modules"],
                "lines": k["texts"],
            }
        )
    return out


def _per_line(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Line text -> {flops, bytes (split evenly over a kernel's lines), seconds, peak_bytes, where}."""
    texts = _texts(report)
    out: dict[str, dict[str, Any]] = {}

    def row(key: str) -> dict[str, Any] | None:
        if key not in texts or not texts[key].strip():
            return None
        return out.setdefault(
            texts[key].strip(),
            {"flops": 0.0, "bytes": 0.0, "seconds": None, "peak_bytes": None, "where": key},
        )

    for f in report.get("fusions") or []:
        keys = [str(x) for x in f.get("lines") or []] or [
            loc["label"] for loc in f.get("locations") or []
        ]
        for k in keys:
            r = row(k)
            if r is not None:
                r["flops"] += (f.get("flops") or 0) / len(keys)
                r["bytes"] += (f.get("bytes") or 0) / len(keys)
    extras = report.get("extras") or {}
    p = extras.get("profile") or {}
    measured = [(str(n), v) for n, v in (p.get("by_cell_line") or {}).items()]
    measured += [(r["label"], r.get("seconds")) for r in p.get("by_line") or []]
    m = extras.get("memory") or {}
    peak = [(str(n), _val(v)) for n, v in (m.get("by_cell_line") or {}).items()]
    peak += [(r["label"], _val(r.get("bytes"))) for r in m.get("by_line") or []]
    for field, pairs in (("seconds", measured), ("peak_bytes", peak)):
        for k, v in pairs:
            r = row(k)
            if r is not None and v is not None and r[field] is None:
                r[field] = v
    return out


def _source_diff(
    before: list[str], after: list[str]
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Hunks of the compiling cell's change, and each after-line's change (text -> kind)."""
    hunks, change = [], {}
    sm = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            continue
        hunks.append(
            {
                "op": op,
                "before": before[i1:i2],
                "after": after[j1:j2],
                "before_start": i1 + 1,
                "after_start": j1 + 1,
            }
        )
        for t in after[j1:j2]:
            change[t.strip()] = "edited" if op == "replace" else "added"
        for t in before[i1:i2]:
            change.setdefault(t.strip(), "removed")
    return hunks, change


def diff_report(
    before: dict[str, Any],
    after: dict[str, Any],
    *,
    labels: tuple[str, str] | None = None,
    program: dict[str, Any] | None = None,
    time: dict[str, Any] | None = None,
    memory: dict[str, Any] | None = None,
    notes: list[str] | None = None,
) -> dict[str, Any]:
    """The diff view of ``after`` against ``before`` (two report dicts)."""
    kernels = _match(_kernels(before), _kernels(after))
    lb, la = _per_line(before), _per_line(after)
    src_b = (before.get("source") or {}).get("lines") or []
    src_a = (after.get("source") or {}).get("lines") or []
    hunks, change = _source_diff(src_b, src_a)
    # other cells the program came from (the model's cell): each against its closest
    # counterpart (cells are renumbered when re-run, so matched by content)
    olds = [s for s in before.get("sources") or [] if s.get("cell") is not None]
    for new in after.get("sources") or []:
        if new.get("cell") is None or not olds:
            continue
        old = max(
            olds,
            key=lambda o: difflib.SequenceMatcher(
                a=o.get("lines") or [], b=new.get("lines") or [], autojunk=False
            ).ratio(),
        )
        more, more_change = _source_diff(old.get("lines") or [], new.get("lines") or [])
        for hunk in more:
            hunk["label"] = f"{old.get('label')} → {new.get('label')}"
        hunks += more
        for text, kind in more_change.items():
            change.setdefault(text, kind)
    lines = []
    for text in list(la) + [t for t in lb if t not in la]:
        b, a = lb.get(text), la.get(text)
        kind = change.get(text) or ("added" if b is None else "removed" if a is None else "same")
        lines.append(
            {
                "text": text,
                "change": kind,
                "where": (a or b)["where"],
                "flops": [b and b["flops"], a and a["flops"]],
                "bytes": [b and b["bytes"], a and a["bytes"]],
                "seconds": [b and b["seconds"], a and a["seconds"]]
                if (b and b["seconds"] is not None) or (a and a["seconds"] is not None)
                else None,
                "peak_bytes": [b and b["peak_bytes"], a and a["peak_bytes"]]
                if (b and b["peak_bytes"] is not None) or (a and a["peak_bytes"] is not None)
                else None,
            }
        )
    sb, sa = before.get("summary") or {}, after.get("summary") or {}
    summary = [
        {
            "figure": k,
            "before": sb.get(k),
            "after": sa.get(k),
            "from": (sa.get("from") or {}).get(k) if isinstance(sa.get("from"), dict) else None,
        }
        for k in ("kernels", "fusions", "flops", "bytes_accessed", "compile_seconds")
        if sb.get(k) is not None or sa.get(k) is not None
    ]
    for k in summary:
        if k["figure"] == "compile_seconds":
            k["from"] = "measured"
    pb = ((before.get("extras") or {}).get("profile") or {}).get("step_seconds")
    pa = ((after.get("extras") or {}).get("profile") or {}).get("step_seconds")
    if pb is not None or pa is not None:
        summary.append(
            {"figure": "time per call (seconds)", "before": pb, "after": pa, "from": "measured"}
        )
    if memory is not None:
        summary.append(
            {
                "figure": "memory peak bytes",
                "before": memory.get("before"),
                "after": memory.get("after"),
                "from": memory.get("source"),
            }
        )
    fl = next((f.get("from") for f in after.get("fusions") or [] if f.get("from")), None)
    labels = labels or ("before", "after")

    def side(r: dict[str, Any], label: str) -> dict[str, Any]:
        g = (r.get("graphs") or {}).get("compiled")
        return {
            "name": r.get("name"),
            "label": label,
            "backend": r.get("backend"),
            "report": {
                "name": r.get("name"),
                "graphs": {"compiled": g},
                "fusions": r.get("fusions") or [],
            },
        }

    return {
        "schema": DIFF_SCHEMA,
        "before": side(before, labels[0]),
        "after": side(after, labels[1]),
        "kernels": kernels,
        "lines": lines,
        "source_diff": hunks,
        "summary": summary,
        "program": program,
        "time": time,
        "memory": memory,
        "from": {
            "flops": (fl or {}).get("flops") if isinstance(fl, dict) else fl or "XLA",
            "bytes": (fl or {}).get("bytes") if isinstance(fl, dict) else fl or "XLA",
            "line_flops": "estimate",
            "line_bytes": "estimate",
            "seconds": "measured" if pb is not None or pa is not None else None,
            "peak_bytes": memory.get("source") if memory else None,
        },
        "notes": list(notes or []),
    }
