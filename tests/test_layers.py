"""The layers of docs/architecture.md are the real imports, and a test keeps them so.

Every ``import`` in ``nbcompile/`` is read from the source (also those inside functions, which
hide cycles from Python), mapped to its unit (``nbcompile.<unit>``), and checked against
``ALLOWED``: the data flow capture → stages → analysis → report → widgets, with
compilation/session/magic/cli on top and targets, measure, debug and frozen beside analysis.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "nbcompile"

#: units any unit may import: errors, formatting, version notes for JAX/IPython internals, the
#: collector pause (_gc)
LEAVES = {"errors", "units", "_compat", "_dirs", "_gc", "__version__"}

#: unit -> the units it may import (besides LEAVES)
ALLOWED: dict[str, set[str]] = {
    "capture": set(),
    "analysis": {"capture"},
    "targets": {"capture", "analysis"},
    "stages": {"capture", "targets"},
    "debug": {"capture", "analysis"},
    "frozen": {"capture", "analysis"},
    "measure": {"capture", "analysis", "targets", "stages", "debug"},
    "report": set(),
    "widgets": {"report"},
    "cache": {"stages"},
    "history": set(),
    "pipeline": {"capture", "targets", "stages", "analysis"},
    "processes": {"capture", "analysis", "targets"},
    "compilation": {
        "capture",
        "targets",
        "stages",
        "analysis",
        "measure",
        "debug",
        "frozen",
        "report",
        "widgets",
        "pipeline",
        "comparison",
        "processes",
    },
    "comparison": {"analysis", "measure", "report", "widgets"},
    "session": {"capture", "cache", "history", "pipeline", "compilation", "widgets", "processes"},
    "render": {"report", "widgets"},
    "cli": {"frozen", "render", "report", "widgets"},
    "magic": {"capture", "cache", "history", "session"},
    "__init__": {"analysis", "compilation", "frozen", "magic", "session", "processes"},
}


def _module_name(path: Path) -> tuple[str, str]:
    """(module, package it resolves relative imports against)."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    module = ".".join(parts)
    if parts[-1] == "__init__":
        module = ".".join(parts[:-1])
        return module, module
    return module, ".".join(parts[:-1])


def unit_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "nbcompile":
        return None
    return "__init__" if len(parts) == 1 else parts[1]


def imports_of(source: str, module: str, package: str) -> list[tuple[str, int]]:
    """Every nbcompile module ``source`` imports (``from pkg import name`` counts ``pkg.name``
    when that is a unit), with its line."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((target, node.lineno))
            if target == "nbcompile":  # from . import analysis / __version__
                found += [(f"nbcompile.{alias.name}", node.lineno) for alias in node.names]
    return [(t, line) for t, line in found if t.startswith("nbcompile") and t != "nbcompile"]


def check_layers(sources: dict[Path, str]) -> list[str]:
    """Violations: imports against ``ALLOWED`` and cycles between units."""
    problems, edges = [], {}
    for path, source in sorted(sources.items()):
        module, package = _module_name(path)
        unit = unit_of(module)
        for target, line in imports_of(source, module, package):
            other = unit_of(target)
            if other is None or other == unit or other in LEAVES:
                continue
            edges.setdefault(unit, set()).add(other)
            if unit not in ALLOWED:
                problems.append(f"{path.relative_to(ROOT)}: unit {unit!r} is not in ALLOWED")
            elif other not in ALLOWED[unit]:
                problems.append(f"{path.relative_to(ROOT)}:{line}: {unit} imports {other}")
    problems += [f"import cycle: {' -> '.join(c)}" for c in _cycles(edges)]
    return problems


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    found, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                found.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    return found


def _package_sources() -> dict[Path, str]:
    return {p: p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py")}


def test_every_import_follows_the_layers():
    assert check_layers(_package_sources()) == []


def test_a_wrong_way_import_is_caught_also_inside_a_function():
    sources = _package_sources()
    path = PACKAGE / "analysis" / "core.py"
    sources[path] += "\n\ndef _late():\n    from ..report import build_report\n"
    path2 = PACKAGE / "report" / "dot.py"
    sources[path2] += "\n\ndef _later():\n    from ..analysis import graph\n"
    problems = check_layers(sources)
    assert any("analysis imports report" in p for p in problems), problems
    assert any("report imports analysis" in p for p in problems), problems
    assert any("cycle" in p and "analysis" in p and "report" in p for p in problems), problems


def test_only_magic_and_compat_import_ipython_and_only_widgets_import_widget_libraries():
    for path, source in _package_sources().items():
        rel = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(source)):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            for name in names:
                top = name.split(".")[0]
                if top == "IPython":
                    assert rel in ("magic.py", "_compat.py"), f"{rel} imports IPython"
                if top in ("ipywidgets", "anywidget", "traitlets"):
                    assert rel.startswith("widgets/"), f"{rel} imports {top}"


def test_architecture_doc_lists_the_real_units_and_arrows():
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    for path in re.findall(r"`(nbcompile/[\w/.]+)`", text):
        assert (ROOT / path).exists(), f"docs/architecture.md names {path}, which does not exist"
    rows = dict(re.findall(r"^\| `([\w_]+)` \|[^|]*\|\s*([^|]*?)\s*\|$", text, flags=re.M))
    for unit, allowed in ALLOWED.items():
        assert unit in rows, f"docs/architecture.md has no row for {unit}"
        documented = set(re.findall(r"`([\w_]+)`", rows[unit]))
        assert documented == allowed, (
            f"{unit}: doc says {sorted(documented)}, code {sorted(allowed)}"
        )


def test_library_code_installed_anywhere_is_not_user_code(tmp_path, monkeypatch):
    """pip --target / PYTHONPATH site folders hold *.dist-info: library, not the user's code."""
    import sys

    from nbcompile.capture import userfiles

    (tmp_path / "somelib").mkdir()
    (tmp_path / "somelib-1.0.dist-info").mkdir()
    (tmp_path / "mine").mkdir()
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    userfiles.is_user_file.cache_clear()
    try:
        assert not userfiles.is_user_file(str(tmp_path / "somelib" / "layers.py"))
        assert userfiles.is_user_file("/home/me/project/model.py")
        assert userfiles.is_user_file("<ipython-input-3-abc123>")
        assert not userfiles.is_user_file("/opt/py/lib/python3.11/site-packages/flax/x.py")
    finally:
        userfiles.is_user_file.cache_clear()
