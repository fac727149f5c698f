"""Memory growth over many recompiles: ``%%compile`` cells vs plain ``jax.jit`` cells.

Each side runs in a fresh process: a real IPython shell runs ``cells`` cells, each compiling
the same small function at a new shape (so every cell compiles; the ``%%compile`` side's cell
cache passes its cap of 64 halfway through a 200-cell run), displayed as a user would see them.
The figure is the resident-set growth per cell over the second half of the cells (after a full
garbage collection at both marks). Run as ``python -m benchmarks._growth SIDE CELLS`` in the
child.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from benchmarks._stats import Row, ratio_at_most
from benchmarks._subprocs import run_module

ROOT = Path(__file__).resolve().parent.parent

_NBCOMPILE = (
    "%%compile\ndef f(x):\n    return jnp.tanh(x @ x.T).sum() * 2.0\nf(jnp.ones(({n}, 16)))"
)
_JIT = "def f(x):\n    return jnp.tanh(x @ x.T).sum() * 2.0\njax.jit(f)(jnp.ones(({n}, 16)))"


def _rss_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as handle:
        pages = int(handle.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def child(side: str, cells: int) -> dict[str, float]:
    """In a fresh process: run the cells, return RSS (MB) at the half and at the end."""
    import gc

    from IPython.testing.globalipapp import start_ipython

    ip = start_ipython()
    ip.run_cell("import jax, jax.numpy as jnp")
    if side == "nbcompile":
        ip.run_line_magic("load_ext", "nbcompile")
    import jax

    jax.config.update("jax_enable_compilation_cache", False)  # measure real compiles only
    marks: dict[str, float] = {}
    template = _NBCOMPILE if side == "nbcompile" else _JIT
    for n in range(1, cells + 1):
        res = ip.run_cell(template.format(n=n))
        if not res.success:
            raise RuntimeError(f"cell {n} failed: {res.error_in_exec!r}")
        if n in (cells // 2, cells):
            gc.collect()
            marks["half" if n == cells // 2 else "end"] = _rss_mb()
    return marks


def _run_side(side: str, cells: int) -> float:
    marks = run_module("benchmarks._growth", side, str(cells))
    return (marks["end"] - marks["half"]) * 2**20 / (cells - cells // 2)


def growth(cells: int, pairs: int) -> Row:
    """RSS growth per cell, ``%%compile`` vs plain ``jax.jit``, over the second half of
    ``cells`` recompiling cells; ``pairs`` fresh-process pairs."""
    row = Row(
        "RSS growth / recompile",
        f"{cells} cells, new shape each",
        "bytes",
        "%%compile cells",
        "jax.jit cells",
        target=ratio_at_most(1.2),
        note=f"{pairs} pairs of fresh processes; growth over cells {cells // 2}–{cells}, "
        "after gc.collect(); displayed like a user's cells",
    )
    subject, anchor = [], []
    try:
        for i in range(pairs):
            sides = [(subject, "nbcompile"), (anchor, "jit")]
            for out, side in sides if i % 2 == 0 else sides[::-1]:
                out.append(_run_side(side, cells))
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        row.note = f"failed: {exc}"[:300]
        return row
    row.set_pairs(subject, anchor)
    return row


if __name__ == "__main__":
    print(json.dumps(child(sys.argv[1], int(sys.argv[2]))))
