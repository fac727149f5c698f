"""%%compile in a real Jupyter kernel (ipykernel driven by nbclient)."""

from __future__ import annotations

import json

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from .memory.test_memory_magic import CELL as MEMORY_CELL
from .memory.test_memory_magic import FORWARD
from .memory.test_memory_magic import SETUP as MEMORY_MODEL

pytestmark = pytest.mark.kernel

SETUP = """%load_ext nbcompile
import jax, jax.numpy as jnp, numpy as np
rng = np.random.default_rng(0)
params = {"w": jnp.asarray(rng.normal(size=(3, 8)), jnp.float32),
          "b": jnp.zeros((1, 8), jnp.float32)}
x = jnp.asarray(rng.normal(size=(4, 3)), jnp.float32)"""

PREDICT = """%%compile
def predict(params, x):
    h = x @ params["w"] + params["b"]
    return jnp.tanh(h) * 2.0
predict(params, x)"""

CHECK = """import nbcompile
assert type(predict).__name__ == "PjitFunction", type(predict)
c = predict.compilation
assert isinstance(c, nbcompile.Compilation) and "fusion" in c.hlo
ref = jax.jit(c.original)(params, x)
assert np.array_equal(np.asarray(predict(params, x)), np.asarray(ref))
lines = sorted({ln for f in c.fusions for ln in f.source_lines})
print("FUSION_LINES", lines)"""


def notebook(*cells: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    return nb


def execute(nb: nbformat.NotebookNode, *, allow_errors: bool = False) -> nbformat.NotebookNode:
    client = NotebookClient(nb, kernel_name="python3", timeout=180, allow_errors=allow_errors)
    client.execute()
    return nb


def text_of(cell: nbformat.NotebookNode) -> str:
    out = []
    for o in cell.get("outputs", []):
        if o.output_type == "stream":
            out.append(o.text)
        elif o.output_type == "error":
            out.append(f"{o.ename}: {o.evalue}\n" + "\n".join(o.traceback))
        elif "data" in o:
            out.append(o.data.get("text/plain", ""))
    return "\n".join(out)


def test_happy_path_binds_and_reports_visible_lines():
    nb = execute(notebook(SETUP, PREDICT, CHECK))
    display = nb.cells[1].outputs
    assert any("text/plain" in o.get("data", {}) for o in display), display
    out = text_of(nb.cells[2])
    lines = eval(out.split("FUSION_LINES", 1)[1].strip())
    # visible cell lines of the %%compile cell: 3 (matmul + bias) and 4 (tanh, scale)
    assert lines and set(lines) <= {2, 3, 4}, lines
    assert 4 in lines


FAILURES = [
    (
        "%%compile\ndef bad(x):\n    if x.sum() > 0:\n        return x\n    return -x\nbad(x)",
        "NBC201",
        "line 3",
    ),
    ("%%compile\na = 1\nb = (a +\n", "NBC100", "line 3"),
    ("%%compile\ndef pos(x):\n    return x[x > 0]\npos(x)", "NBC202", "line 3"),
]


@pytest.mark.parametrize(("cell", "code", "where"), FAILURES)
def test_failure_names_line_and_kernel_survives(cell, code, where):
    after = "%%compile -q\ndef ok(x):\n    return x + 1\nok(x)"
    probe = "print('a' in globals(), 'bad' in globals(), type(ok).__name__)"
    nb = execute(notebook(SETUP, cell, after, probe), allow_errors=True)
    err = [o for o in nb.cells[1].outputs if o.output_type == "error"]
    assert len(err) == 1, nb.cells[1].outputs
    assert code in err[0].evalue and where in err[0].evalue, err[0].evalue
    # the traceback the user sees is short: JAX's cause in a line or two, then ours
    assert len("\n".join(err[0].traceback).splitlines()) <= 8
    assert text_of(nb.cells[3]).strip() == "False False PjitFunction"


def test_run_all_stops_at_the_failing_cell():
    nb = notebook(SETUP, FAILURES[0][0], "print('after')")
    with pytest.raises(CellExecutionError) as info:
        execute(nb)
    assert "NBC201" in str(info.value)
    assert nb.cells[2].get("outputs") == []


def test_executable_from_the_persistent_cache_keeps_cell_lines(tmp_path, monkeypatch):
    """A second kernel loads the executable compiled by the first (whose cell file had another
    name); fusions must still map to this cell's lines."""
    monkeypatch.setenv("NBCOMPILE_CACHE_DIR", str(tmp_path / "cache"))
    setup = SETUP + "\njax.config.update('jax_persistent_cache_min_compile_time_secs', 0)"
    probe = (
        "print('LINES', sorted({ln for f in predict.compilation.fusions for ln in f.source_lines}))"
    )
    runs = [execute(notebook(setup, PREDICT, probe)) for _ in range(2)]
    assert any((tmp_path / "cache").iterdir()), "nothing was written to the persistent cache"
    lines = [text_of(nb.cells[2]).split("LINES", 1)[1].strip() for nb in runs]
    assert lines[0] == lines[1] and lines[0] != "[]", lines


MEMORY_SETUP = "%load_ext nbcompile\n" + MEMORY_MODEL  # the shell test's model and cell

MEMORY_CHECK = """import nbcompile
m = nbcompile.last().memory_map
residuals = [b for b in m.at_peak if b.kind == "residual"]
print("RESIDUAL_LINES", sorted({line for b in residuals for line in b.source_lines}))
print("RESIDUAL_SHARE", round(sum(b.bytes for b in residuals) / m.peak_bytes, 3))"""


def test_memory_residuals_sit_on_the_forward_lines_in_a_real_kernel():
    """``--grad --memory`` of an MLP in an ipykernel: the residuals the backward pass keeps are
    live at the peak, on the visible lines of the forward ``tanh`` ops that made them."""
    nb = execute(notebook(MEMORY_SETUP, MEMORY_CELL, MEMORY_CHECK))
    out = text_of(nb.cells[2])
    lines = json.loads(out.split("RESIDUAL_LINES", 1)[1].splitlines()[0])
    share = float(out.split("RESIDUAL_SHARE", 1)[1].split()[0])
    assert len(lines) >= 2 and set(lines) <= FORWARD, out
    assert share >= 0.4, out


FOREIGN = """import os, tempfile
import numpy as np
import nbcompile
from nbcompile.errors import FreezeError
os.environ["NBCOMPILE_CHECKED_DIR"] = tempfile.mkdtemp()  # freeze records its program here
nbcompile.freeze(lambda p, x: x @ p["w"] + p["b"], params, x, path="m.nbc")
os.environ["NBCOMPILE_CHECKED_DIR"] = tempfile.mkdtemp()  # now the file comes from elsewhere
m = nbcompile.load("m.nbc")
got = np.asarray(m(x))
assert np.allclose(got, np.asarray(x @ params["w"] + params["b"]), atol=1e-6)
print("SHAPES", len([f for f in os.listdir(os.path.join(os.environ["NBCOMPILE_CHECKED_DIR"],
      os.listdir(os.environ["NBCOMPILE_CHECKED_DIR"])[0])) if f.endswith(".shapes")]))"""

HOSTILE = """bad = nbcompile.load({path!r})
leaves = [np.zeros([2 if d == "b" else d for d in leaf["shape"]], leaf["dtype"])
          for leaf in bad.signature["inputs"]["leaves"]]
try:
    bad.call_leaves(leaves)
except FreezeError as err:
    print("REFUSED", err.code, err)"""


def test_a_file_from_elsewhere_is_checked_in_a_child_inside_a_real_kernel(tmp_path):
    """The first-call child (a fork of the kernel, with ipykernel's threads running) lowers a
    good file from elsewhere and refuses the fuzz-found file that crashes JAX's shape
    refinement; the kernel survives with its namespace."""
    from pathlib import Path

    hostile = Path(__file__).parent / "data" / "fuzz_seed1_55099.nbc"
    nb = notebook(SETUP, FOREIGN, HOSTILE.format(path=str(hostile)), "print('ALIVE', x.shape)")
    client = NotebookClient(
        nb, kernel_name="python3", timeout=180, resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    assert "SHAPES 1" in text_of(nb.cells[1]), text_of(nb.cells[1])
    refused = text_of(nb.cells[2])
    assert "REFUSED NBC500" in refused and "shape refinement" in refused, refused
    assert "ALIVE (4, 3)" in text_of(nb.cells[3])


CALLS_CHECK = """c = nbcompile.last()
groups = {g.label: g for g in c.graph.groups}
fusion_calls = sorted({f for fu in c.fusions for f in fu.functions})
pairs = [list(p) for p in c.gradient.pairs]
print("CALLS", json.dumps({
    "blocks": [label for label in groups if label.startswith("block#") and "/" not in label],
    "gelu": [g.call for label, g in groups.items() if label.endswith("gelu")],
    "fusion_calls": fusion_calls,
    "pairs": pairs,
}))"""


def test_a_ten_layer_train_step_is_drawn_by_the_users_calls_in_a_real_kernel():
    """Issue 26's acceptance, through the magic in a real kernel: ``block`` defined in an
    earlier cell, called from a loop in the ``%%compile --grad`` cell, gives the groups
    ``block#1`` … ``block#10`` (nested ``gelu`` one library box each), fusions naming the calls
    and ten forward/backward block pairs, each with the bytes of its residuals."""
    from .ui.test_ui_backprop import BLOCK, BLOCKS
    from .ui.test_ui_backprop import CELL as GRAD_CELL

    nb = execute(notebook("%load_ext nbcompile", BLOCK, GRAD_CELL, CALLS_CHECK))
    out = text_of(nb.cells[-1])
    got = json.loads(out.split("CALLS ", 1)[1].splitlines()[0])
    assert got["blocks"] == BLOCKS, got["blocks"]
    assert got["gelu"] and set(got["gelu"]) == {"library"}, got["gelu"]
    assert {b for b in BLOCKS if any(f.split("/")[0] == b for f in got["fusion_calls"])} == set(
        BLOCKS
    ), got["fusion_calls"]
    pairs = {f: (b, n) for f, b, n in got["pairs"] if f in BLOCKS}
    assert list(pairs) == BLOCKS
    assert all(b == f + " (backward)" and n > 0 for f, (b, n) in pairs.items()), pairs
