"""`nbcompile render` / `make demo`: execute a notebook, export HTML viewable offline."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.kernel


def render(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nbcompile.cli", "render", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_render_quickstart_offline(tmp_path):
    out = tmp_path / "demo.html"
    res = render(str(ROOT / "notebooks" / "01_quickstart.ipynb"), "-o", str(out))
    assert res.returncode == 0, res.stderr
    html = out.read_text()
    assert 'src="data:image/svg+xml;base64,' in html
    assert "nbcompileView" in html  # the interactive renderer ships inline
    assert "application/vnd.jupyter.widget-view+json" not in html
    from nbcompile.render import remote_references

    assert remote_references(html) == []


def test_render_stops_on_a_failing_cell(tmp_path):
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell("%load_ext nbcompile"),
            nbformat.v4.new_code_cell(
                "%%compile\ndef f(x):\n    if x > 0:\n        return x\nf(1.0)"
            ),
        ]
    )
    path = tmp_path / "bad.ipynb"
    nbformat.write(nb, path)
    res = render(str(path), "-o", str(tmp_path / "bad.html"))
    assert res.returncode == 1
    assert "NBC201" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "bad.html").exists()
