"""Source locations from every cell: a model defined in one cell and compiled from another has
its fusions on the defining cell's lines (``In [n] line k``), the library frame kept as detail.

Through a real IPython shell here; through a real kernel (and a second kernel that loads the
executable from JAX's persistent cache) in ``test_locations_kernel.py``.
"""

from __future__ import annotations

import pytest

import nbcompile
from nbcompile.analysis import Location, locations_of, modules_of
from nbcompile.capture.source import CellFiles
from nbcompile.report.html import render_html

DEFINE = """import jax, jax.numpy as jnp
import equinox as eqx
from flax import nnx

def mlp(w, x):
    h = jnp.tanh(x @ w)
    return jnp.sum(h * 2.0)

class Model(nnx.Module):
    def __init__(self, rngs):
        self.lin = nnx.Linear(4, 8, rngs=rngs)

    def __call__(self, x):
        return jnp.tanh(self.lin(x))

class EqxModel(eqx.Module):
    lin: eqx.nn.Linear

    def __call__(self, x):
        return jnp.tanh(jax.vmap(self.lin)(x))

model = Model(nnx.Rngs(0))
emodel = EqxModel(eqx.nn.Linear(4, 8, key=jax.random.key(0)))
w = jnp.ones((4, 8))
x = jnp.ones((2, 4))
"""


def test_location_label_json_and_equality():
    cell = Location(3, "<ipython-input-3-0123abcd>", 7, "flax/nnx/nn/linear.py:889")
    assert cell.label == "In [3] line 7" and cell.source_label == "In [3]"
    assert cell.to_json() == {
        "cell": 3,
        "file": "<ipython-input-3-0123abcd>",
        "line": 7,
        "label": "In [3] line 7",
        "detail": "flax/nnx/nn/linear.py:889",
    }
    assert cell == Location(3, "<ipython-input-3-0123abcd>", 7)  # detail is not identity
    assert Location(None, "/tmp/somewhere/model.py", 12).label == "model.py:12"
    assert Location(None, "/tmp/ipykernel_1/abc.py", 4).label == "In [?] line 4"


def test_cell_files_match_by_content_after_a_restart():
    cells = CellFiles({"/tmp/ipykernel_222/9f8e.py": 5, "<ipython-input-6-77aa>": 6})
    assert cells.count("/tmp/ipykernel_222/9f8e.py") == 5
    # the executable was compiled by an earlier kernel: same cell hash, other folder
    assert cells.count("/tmp/ipykernel_111/9f8e.py") == 5
    assert cells.count("<ipython-input-2-77aa>") == 6
    assert cells.count("<ipython-input-9-ffff>") == 9  # unknown cell: IPython's own number
    assert cells.count("/tmp/ipykernel_111/0000.py") is None


@pytest.fixture(scope="module")
def defined(shell):
    shell.reset(new_session=False)
    number = shell.execution_count
    result = shell.run_cell(DEFINE, store_history=True)
    assert result.success, result.error_in_exec
    return shell, number


def _compile(shell, call: str):
    result = shell.run_cell(f"%%compile -q\n{call}", store_history=True)
    assert result.success, result.error_in_exec
    return nbcompile.last()


def _defining_lines(text: str, *needles: str) -> set[int]:
    return {i for i, line in enumerate(text.splitlines(), 1) if any(n in line for n in needles)}


@pytest.mark.parametrize(
    ("call", "lines", "library"),
    [
        ("mlp(w, x)", ("jnp.tanh(x @ w)", "jnp.sum(h * 2.0)"), None),
        ("model(x)", ("jnp.tanh(self.lin(x))",), "flax/nnx/"),
        ("emodel(x)", ("jnp.tanh(jax.vmap(self.lin)(x))",), "equinox/"),
    ],
)
def test_fusions_sit_on_the_defining_cells_lines(defined, call, lines, library):
    shell, number = defined
    c = _compile(shell, call)
    expected = _defining_lines(DEFINE, *lines)
    assert c.fusions
    found: set[int] = set()
    for fusion in c.fusions:
        assert fusion.locations, fusion.name
        assert fusion.source_lines == []  # nothing of it is on the %%compile cell's lines
        for loc in fusion.locations:
            assert loc.cell == number and loc.label == f"In [{number}] line {loc.line}"
            found.add(loc.line)
        assert locations_of(c.analysis, fusion.name) == fusion.locations
        assert modules_of(c.analysis, fusion.name) == fusion.modules
    assert found and found <= expected | _defining_lines(DEFINE, "def ", "return"), found
    assert found & expected
    details = {loc.detail for f in c.fusions for loc in f.locations if loc.detail}
    if library is None:
        assert not details
    else:  # the library frame below the user's line is kept, as a short path and line
        assert any(d.startswith(library) and d.rsplit(":", 1)[1].isdigit() for d in details), (
            details
        )


def test_report_lines_and_sources_cover_the_defining_cell(defined):
    shell, number = defined
    c = _compile(shell, "mlp(w, x)")
    report = c.report()
    (source,) = [s for s in report["sources"] if s["cell"] == number]
    assert source["label"] == f"In [{number}]" and source["lines"] == DEFINE.splitlines()
    keyed = {k: v for k, v in report["lines"].items() if k.startswith(source["key_prefix"])}
    assert keyed
    for key, entry in keyed.items():
        line = int(key[len(source["key_prefix"]) :])
        assert entry["location"]["line"] == line and entry["location"]["cell"] == number
        for name in entry["fusions"]:
            assert key in [loc.label for loc in locations_of(c.analysis, name)]
    assert sum(e["cost_share"] for e in keyed.values()) == pytest.approx(1.0)
    tanh = _defining_lines(DEFINE, "jnp.tanh(x @ w)").pop()
    assert keyed[f"In [{number}] line {tanh}"]["nodes"], "traced ops are keyed by location too"
    page = render_html(report)  # the static fallback shows the defining cell, annotated
    assert f'<th colspan="4">In [{number}]</th>' in page
    assert "h = jnp.tanh(x @ w)" in page


def test_rerun_of_the_defining_cell_relabels_a_reused_analysis(defined):
    shell, _ = defined
    shell.run_cell(DEFINE, store_history=True)
    number = shell.execution_count - 1
    c = _compile(shell, "mlp(w, x)")
    assert {loc.cell for f in c.fusions for loc in f.locations} == {number}
