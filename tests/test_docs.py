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
