"""Build the tutorial notebooks from their sources in notebooks/src (percent format).

    python scripts/build_notebooks.py          # rebuild every notebooks/NN_*.ipynb
    python scripts/build_notebooks.py --check  # fail if a stored notebook differs from its source

Stored notebooks carry no outputs: the test suite executes them, `make demo` renders one.

A cell starts at ``# %% md`` or ``# %% code``; ``# %% code hide`` is a code cell whose input is
hidden (tag ``hide-input``, and JupyterLab's ``source_hidden``): the answer to a "predict first"
exercise, still executed and checked like every other cell.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "notebooks" / "src"
CELL = re.compile(r"^# %% ?(md|code|code hide)\s*$", flags=re.M)
HIDDEN = {"tags": ["hide-input"], "jupyter": {"source_hidden": True}}


def build(src: Path) -> nbformat.NotebookNode:
    parts = CELL.split(src.read_text())
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
    }
    for kind, body in zip(parts[1::2], parts[2::2], strict=True):
        body = body.strip("\n")
        if kind == "md":
            lines = [ln[2:] if ln.startswith("# ") else ln.lstrip("#") for ln in body.splitlines()]
            nb.cells.append(nbformat.v4.new_markdown_cell("\n".join(lines)))
        else:
            cell = nbformat.v4.new_code_cell(body)
            if kind == "code hide":
                cell.metadata = nbformat.from_dict(HIDDEN)
            nb.cells.append(cell)
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"c{i:02d}"
    return nb


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for src in sorted(SRC.glob("[0-9][0-9]_*.py")):
        out = ROOT / "notebooks" / f"{src.stem}.ipynb"
        text = nbformat.writes(build(src)) + "\n"
        if check:
            if not out.exists() or out.read_text() != text:
                stale.append(out.name)
        else:
            out.write_text(text)
    if stale:
        print("stale notebooks (run scripts/build_notebooks.py):", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
