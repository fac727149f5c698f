"""Rows for the graph layout: crossings, edges through boxes and layout time on a fixed corpus.

The corpus (:mod:`benchmarks.layout_corpus`: every tutorial's reports, the 2/12/24-layer train
steps, the Flax / Equinox / Keras example models forward and ``--grad``) is laid out at the
view's first expansion by four engines — the layout before issue 20 ("legacy"), the own layered
layout, ``@dagrejs/dagre`` and ``elkjs`` — with the same boxes and edges
(``js/bench/layout-bench.mjs``, Node). Counts are deterministic (n = 1); times are Node's, medians
of 3, on a shared machine. A last row times the Python port drawing the static picture.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchmarks._stats import Row, Target, cold

__all__ = ["layout_rows", "static_picture_row"]

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "js" / "bench" / "layout-bench.mjs"
CORPUS = ROOT / "build" / "layout-corpus"
ENGINES = ("legacy", "own", "dagre", "elk")


def _quick_corpus(out: Path) -> Path:
    import nbcompile
    from benchmarks._extra_models import build

    out.mkdir(parents=True, exist_ok=True)
    for name in ("MLP", "1-layer train d32"):
        fn, args = build(name)
        report = nbcompile.compile(fn, *args).report()
        (out / f"{name.replace(' ', '_')}.json").write_text(json.dumps(report))
    return out


def _corpus(quick: bool, out_dir: Path) -> list[Path]:
    if quick:
        return sorted(_quick_corpus(out_dir / "layout-corpus-quick").glob("*.json"))
    if not any(CORPUS.glob("*.json")):
        subprocess.run(
            [sys.executable, "-m", "benchmarks.layout_corpus"], cwd=ROOT, check=True, timeout=1800
        )
    return sorted(CORPUS.glob("*.json"))


def layout_rows(quick: bool, out_dir: Path) -> list[Row]:
    """Crossings and edges through boxes (own vs legacy; dagre and elkjs beside), layout time."""
    node = shutil.which("node")
    rows = [
        Row(
            "layout crossings",
            "corpus",
            "count",
            "own layered layout",
            "layout before",
            target=Target("ratio", "<=", 0.5, "≤ 50 % of before"),
        ),
        Row(
            "edges through boxes",
            "corpus",
            "count",
            "own layered layout",
            "layout before",
            target=Target("subject", "<=", 0, "0"),
        ),
        Row("layout time", "corpus", "s", "own layered layout (Node)", "layout before"),
    ]
    files = _corpus(quick, out_dir) if node else []
    if not files:
        for row in rows:
            row.note = "not available: " + ("Node.js is missing" if not node else "no corpus")
        return rows
    run = subprocess.run(
        [node, str(BENCH), *map(str, files)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    )
    result = json.loads(run.stdout)
    total = result["total"]
    graphs = len(result["rows"])
    note = f"{graphs} graphs of {len(files)} reports; n=1 (counts are deterministic)"
    for row, key, scale in (
        (rows[0], "crossings", 1.0),
        (rows[1], "through", 1.0),
        (rows[2], "ms", 1e-3),
    ):
        row.set_pairs([total["own"][key] * scale], [total["legacy"][key] * scale])
        row.note = note
        row.extra = {e: total[e][key] * scale for e in ENGINES if e in total}
    rows[1].extra["graphs with an edge through a box"] = {
        e: sum(1 for r in result["rows"] if r[e]["through"] > 0) for e in ENGINES if e in total
    }
    rows[2].note = f"{graphs} graphs, Node, median of 3 runs each; shared machine"
    return rows


def static_picture_row(model: str) -> Row:
    """The Python port drawing the static fallback (every tab's pictures) of ``model``."""
    from benchmarks._display import compiled
    from nbcompile.report.html import render_html

    report = compiled(model).report()
    times = []
    for _ in range(3):
        cold()  # lay the pictures out afresh each time (the renderers remember scenes)
        t0 = time.perf_counter()
        html = render_html(report, interactive=False)
        times.append(time.perf_counter() - t0)
    row = Row(
        "static picture",
        model,
        "s",
        "fallback HTML (Python layout + SVG)",
        None,
        note=f"3 runs; {len(html) / 1000:.0f} KB of HTML",
    )
    row.set_pairs(times)
    return row
