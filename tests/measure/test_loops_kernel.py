"""Issue 43's acceptance through the magic in a real Jupyter kernel: a ``lax.scan`` of 6
iterations whose body takes a heavy ``lax.cond`` branch on iteration 3 only. ``c.loops`` names
it (kind, trip count, the cell line that called ``lax.scan``) and ``--profile`` measures
iteration 3 at >= 3x the median of the others (the heavy branch is ~100x the light one: a
structural fact, not a timing threshold)."""

from __future__ import annotations

import json

import pytest

from ..test_kernel import execute, notebook, text_of

pytestmark = [pytest.mark.kernel, pytest.mark.profiler]

SETUP = """%load_ext nbcompile
import jax, jax.numpy as jnp
from jax import lax
x = jnp.ones((256, 256)) * 0.01
w = jnp.eye(256) * 0.5"""

# cell line 1 is %%compile; line 9 calls lax.scan
SCAN = """%%compile --profile 5
def f(x, w):
    def heavy(c):
        for _ in range(8):
            c = jnp.tanh(c @ w)
        return c
    def body(c, i):
        return lax.cond(i == 3, heavy, lambda c: c + 1.0, c), None
    return lax.scan(body, x, jnp.arange(6))[0]
f(x, w)"""

CHECK = """import json, statistics, nbcompile
c = f.compilation
(loop,) = c.loops
(t,) = c.profile.loops
others = [s for i, s in enumerate(t.iterations) if i != 3]
print("LOOPS", json.dumps({
    "kind": loop.kind, "trip_count": loop.trip_count, "line": loop.line,
    "label": loop.label, "whiles": loop.whiles, "iterations": t.iterations,
    "ratio": t.iterations[3] / statistics.median(others),
    "report": [d["label"] for d in c.extras["profile"]["loops"]],
}))"""


def test_the_heavy_iteration_of_a_scan_through_the_magic():
    nb = execute(notebook(SETUP, SCAN, CHECK))
    out = text_of(nb.cells[2])
    found = json.loads(out.split("LOOPS", 1)[1].strip().splitlines()[0])
    assert (found["kind"], found["trip_count"], found["line"]) == ("scan", 6, 9), found
    assert found["label"] == "scan × 6 · line 9" and found["whiles"]
    assert len(found["iterations"]) == 6
    assert found["ratio"] >= 3, found
    assert found["report"] == ["scan × 6 · line 9"]
