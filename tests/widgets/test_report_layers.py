"""``nbcompile/report`` in one direction (issue 42): the page (``html``) uses the static copy
(``fallback``), which uses the figures (``statsfig``, ``passesfig``, ``diffhtml``), which use
the pictures (``svg``, ``charts``) and the layout (``scene``, ``layout``, ``graphmodel``); no
module imports one above it, also inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

REPORT = Path(__file__).resolve().parents[2] / "nbcompile" / "report"


def _imports() -> dict[str, set[str]]:
    out = {}
    for path in REPORT.glob("*.py"):
        if path.stem == "__init__":
            continue
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                found.add(node.module.split(".")[0])
        out[path.stem] = found
    return out


def test_report_modules_import_in_one_direction():
    graph = _imports()
    assert "html" in graph and "fallback" in graph["html"]
    # no cycle: depth-first, a module is never reached again from itself
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        if state.get(m) == 1:
            raise AssertionError(" -> ".join([*path, m]))
        if state.get(m) == 2:
            return
        state[m] = 1
        for n in sorted(graph.get(m, ())):
            visit(n, [*path, m])
        state[m] = 2

    for m in graph:
        visit(m, [])
    # the figures feed the page, never back
    for m in ("fallback", "statsfig", "passesfig", "diffhtml", "svg", "charts", "scene"):
        assert "html" not in graph[m], m
