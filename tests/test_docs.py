"""The docs cover every error code and every public name."""

from __future__ import annotations

from pathlib import Path

import nbcompile
from nbcompile.errors import CODES

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_every_error_code_is_documented():
    text = (DOCS / "errors.md").read_text()
    missing = [code for code in CODES if f"`{code}`" not in text]
    assert not missing, missing


def test_every_public_name_is_in_the_api_reference():
    text = (DOCS / "api.md").read_text()
    public = [n for n in nbcompile.__all__ if not n.startswith("_") and "ipython" not in n]
    missing = [n for n in public if f".{n}\n" not in text]
    assert not missing, missing


def test_import_is_light():
    import subprocess
    import sys

    code = (
        "import sys, nbcompile; bad = [m for m in ('IPython', 'ipywidgets', 'anywidget', "
        "'flax', 'equinox', 'keras') if m in sys.modules]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_latest_benchmark_table_is_the_stored_run():
    """docs/benchmarks.md's "Latest run" table is benchmarks/results.json's, printed by the
    harness itself (so prose and table come from one run), with that run's date and machine."""
    import json

    from benchmarks._stats import Row
    from benchmarks._table import format_table

    data = json.loads((DOCS.parent / "benchmarks" / "results.json").read_text())
    table = format_table([Row.from_json(r) for r in data["rows"]])
    section = (DOCS / "benchmarks.md").read_text().split("\n## Latest run\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    shown = section.split("```", 2)[1].strip("\n")
    assert [line.rstrip() for line in shown.splitlines()] == [
        line.rstrip() for line in table.splitlines()
    ]
    assert data["date"][:10] in section and data["machine"]["cpu"].split()[0] in section
