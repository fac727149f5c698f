"""Source locations from every cell, in a real Jupyter kernel (ipykernel driven by nbclient):
a Flax NNX model and a plain function defined in cell 2 and compiled from cell 3 have their
fusions on cell 2's lines (``In [2] line k``); a second kernel that loads the executable from
JAX's persistent cache (compiled by the first, whose cell files had other names) says the same.
"""

from __future__ import annotations

import json

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = [pytest.mark.kernel, pytest.mark.slow]

SETUP = """%load_ext nbcompile
import jax, jax.numpy as jnp
jax.config.update('jax_persistent_cache_min_compile_time_secs', 0)
from flax import nnx"""

DEFINE = """def mlp(w, x):
    h = jnp.tanh(x @ w)
    return jnp.sum(h * 2.0)

class Model(nnx.Module):
    def __init__(self, rngs):
        self.lin = nnx.Linear(4, 8, rngs=rngs)

    def __call__(self, x):
        return jnp.tanh(self.lin(x))

model = Model(nnx.Rngs(0))
w = jnp.ones((4, 8))
x = jnp.ones((2, 4))"""

PROBE = """import json, nbcompile
c = nbcompile.last()
print("LOCATIONS", json.dumps([[loc.to_json() for loc in f.locations] for f in c.fusions]))
print("SOURCES", json.dumps([[s["cell"], s["key_prefix"]] for s in c.report()["sources"]]))"""


def _run() -> list[dict]:
    nb = nbformat.v4.new_notebook()
    cells = [SETUP, DEFINE, "%%compile -q\nmlp(w, x)", PROBE, "%%compile -q\nmodel(x)", PROBE]
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    NotebookClient(nb, kernel_name="python3", timeout=180).execute()
    out = []
    for index in (3, 5):
        text = "".join(o.get("text", "") for o in nb.cells[index].outputs)
        fields = dict(line.split(" ", 1) for line in text.splitlines() if " " in line)
        out.append({k: json.loads(v) for k, v in fields.items()})
    return out


def _lines_of(*needles: str) -> set[int]:
    return {i for i, line in enumerate(DEFINE.splitlines(), 1) if any(n in line for n in needles)}


def test_model_in_an_earlier_cell_in_a_kernel_and_after_a_restart(tmp_path, monkeypatch):
    monkeypatch.setenv("NBCOMPILE_CACHE_DIR", str(tmp_path / "cache"))
    runs = [_run() for _ in range(2)]  # the second kernel reads JAX's persistent cache
    assert any((tmp_path / "cache").iterdir()), "nothing was written to the persistent cache"
    for plain, nnx_model in runs:
        for result, expected, library in (
            (plain, _lines_of("jnp.tanh(x @ w)", "jnp.sum(h * 2.0)"), None),
            (nnx_model, _lines_of("jnp.tanh(self.lin(x))"), "flax/nnx/"),
        ):
            locations = [loc for fusion in result["LOCATIONS"] for loc in fusion]
            assert locations and all(fusion for fusion in result["LOCATIONS"])
            assert {loc["cell"] for loc in locations} == {2}
            assert {loc["line"] for loc in locations} <= expected
            assert all(loc["label"] == f"In [2] line {loc['line']}" for loc in locations)
            assert "/ipykernel_" in locations[0]["file"]
            details = [loc["detail"] for loc in locations if loc["detail"]]
            assert (
                (not details) if library is None else any(d.startswith(library) for d in details)
            ), details
            assert result["SOURCES"] == [[2, "In [2] line "]]
