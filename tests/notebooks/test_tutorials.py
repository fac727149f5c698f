"""Every tutorial runs top to bottom in a real kernel; its assertion cells check its claims."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
TIMES = ROOT / "build" / "notebook-times.json"
BUDGET_BYTES = 200_000  # a stored tutorial carries no outputs; this catches accidents

pytestmark = pytest.mark.kernel


def test_there_are_tutorials():
    assert len(NOTEBOOKS) >= 1


def test_stored_notebooks_are_clean_and_match_their_sources():
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        assert path.stat().st_size < BUDGET_BYTES, path.name
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, path.name
    check = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_notebooks.py"),
                            "--check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_tutorial_runs_and_its_claims_hold(path, tmp_path):
    work = tmp_path / path.name
    shutil.copy(path, work)
    nb = nbformat.read(work, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, kernel_name="python3", timeout=300, allow_errors=False,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    seconds = time.perf_counter() - start
    asserts = sum("assert " in c.source for c in nb.cells if c.cell_type == "code")
    assert asserts >= 1, f"{path.name} checks none of its claims"
    TIMES.parent.mkdir(exist_ok=True)
    times = json.loads(TIMES.read_text()) if TIMES.exists() else {}
    times[path.stem] = round(seconds, 1)
    TIMES.write_text(json.dumps(times, indent=1, sort_keys=True))
    assert seconds < 120, f"{path.name} took {seconds:.0f} s (budget: 60 s on the CI machine)"
