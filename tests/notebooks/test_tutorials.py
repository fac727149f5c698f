"""Every tutorial runs top to bottom in a real kernel, once per session, with no traceback or
backend noise in its output; its assertion cells check its claims, and its prose states no
figure it does not compute. Tutorials with a test module of their own (``_run.DEDICATED``) are
executed there; this module runs the others and checks what holds for all."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

import nbformat
import pytest

from ._run import DEDICATED, NOTEBOOKS, ROOT, execute, noise, outputs_text

BUDGET_BYTES = 60_000  # a stored tutorial carries no outputs; this catches accidents
# a measured figure written into prose: "12 ms", "3.5×", "97%", "4 GB/s", "1.2 KB"
FIGURE = re.compile(r"\d[\d.,]*\s*(ms|µs|s\b|%|×|x\b|GB|MB|KB|GiB|MiB|GFLOP|B\b)")
HERE = [p for p in NOTEBOOKS if p.stem not in DEDICATED]
# The twelve claims the tutorials teach (docs/tutorials.md), each with the assertion on a measured
# number that would fail if the claim were false: (notebook, code that must be in an assert).
CLAIMS = {
    "a model is compiled from a graph; dispatching it op by op costs time": [
        ("02", 'assert s["kernels"] < s["eager_kernels"]'),
        ("07", "assert b.speedup > 1.2"),
    ],
    "constant folding computes constant work once, at compile time": [
        ("03", "assert flops_off - flops_on == 2 * 128**3"),
        ("03", "assert t_off > t_on"),
    ],
    "operator fusion runs many ops as one kernel": [
        ("03", "off.kernels > on.kernels"),
        ("03", "assert off.time.median > 2 * on.time.median"),
    ],
    "fusion means fewer memory transfers, and bytes are time": [
        ("03", "assert off.bytes_accessed > 10 * on.bytes_accessed"),
        ("03", "assert sweep[big] < max(sweep[b] for b in small) / 2"),
        ("03", "assert 1 / 3 < ratio < 3"),
        ("09", "and bytes_off > 1.5 * bytes_on"),
        ("09", "assert n_off > n_on"),
    ],
    "autodiff builds the backward graph (JAX), XLA optimises it": [
        ("04", "assert sorted(dots.values()) == [1, 2]"),
        ("04", "assert abs(grad_flops / predicted_grad - 1) < 0.2"),
        ("04", "np.testing.assert_allclose(float(grads"),
        ("04", "assert per_layer == [saved_per_layer] * DEPTH"),
    ],
    "compiling is hardware-specific": [
        ("05", 'assert bf16 and "bf16" not in cpu.hlo'),
        ("05", "assert intensity < v5e.ridge"),
        ("05", "assert all(abs(o / r - 1) < 0.2 for _, r, o in sweep.values())"),
        ("05", "assert crossing_pred / 2 < crossing < 2 * crossing_pred"),
    ],
    "a frozen model is one file with the architecture and the weights": [
        ("06", 'assert os.listdir(out) == ["model.nbc"]'),
        ("06", "assert served.returncode == 0"),
    ],
    "freezing writes what was traced; eval mode strips the training-only ops": [
        ("06", "assert file_census(frozen_train)[0] > 0 and file_census(frozen_train)[1] >= 2"),
        ("06", "assert file_census(frozen)[0] == 0 and file_census(frozen)[1] == 0"),
    ],
    "the frozen model gives the same output": [
        ("06", "assert np.array_equal(y_served, here)"),
        ("06", "assert np.array_equal(np.asarray(model(x_new)), here)"),
    ],
    "a static graph is harder to debug, and the tools differ": [
        ("07", "assert seen == [True, False]"),
        ("07", "assert np.isfinite(compiled_out) and np.isnan(eager_out)"),
        ("07", "assert div.differs and div.first"),
        ("07", 'assert nbc_error.code == "NBC201" and "--static" in nbc_error.hint'),
    ],
    "a profile attributes the time to kernels and lines: here the matrix products": [
        ("09", "assert p.step_seconds > 1e-3 and p.coverage >= 0.95"),
        ("09", "assert matmul_share > 0.5"),
    ],
    "a training step's memory is mostly residuals; remat trades one forward pass for them": [
        ("10", 'assert kinds["residual"] > kinds["parameter"] + kinds["output"]'),
        ("10", "assert plain.fits is False and remat.fits is True"),
        ("10", "assert abs(remat_flops / (4 * forward_pred) - 1) < 0.1"),
        ("10", "assert abs(remat_c.gradient.residual_bytes / residual_pred - 1) < 0.2"),
    ],
}

pytestmark = pytest.mark.kernel


def test_there_are_tutorials_and_each_has_one_runner():
    assert len(NOTEBOOKS) >= 10
    for stem, module in DEDICATED.items():
        assert (ROOT / "notebooks" / f"{stem}.ipynb").exists(), stem
        assert "_run import" in (ROOT / "tests" / "notebooks" / module).read_text(), module


def test_stored_notebooks_are_clean_and_match_their_sources():
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        assert path.stat().st_size < BUDGET_BYTES, path.name
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, path.name
    check = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_notebooks.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_each_claim_has_its_assertion_cell():
    asserts = {
        p.stem[:2]: [
            c.source
            for c in nbformat.read(p, as_version=4).cells
            if c.cell_type == "code" and "assert" in c.source
        ]
        for p in NOTEBOOKS
    }
    assert len(CLAIMS) == 12
    for claim, checks in CLAIMS.items():
        for notebook, code in checks:
            assert any(code in cell for cell in asserts[notebook]), (claim, notebook, code)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_prose_states_no_figure_the_notebook_does_not_compute(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            assert not FIGURE.search(cell.source), (path.name, FIGURE.search(cell.source)[0])


@pytest.mark.parametrize("path", HERE, ids=[p.stem for p in HERE])
def test_tutorial_runs_and_its_claims_hold(path, tmp_path):
    nb, seconds = execute(path, tmp_path)
    asserts = sum("assert " in c.source for c in nb.cells if c.cell_type == "code")
    assert asserts >= 1, f"{path.name} checks none of its claims"
    assert noise(nb) == [], noise(nb)
    if path.stem.startswith("05") and importlib.util.find_spec("jax_cuda12_plugin"):
        out = outputs_text(nb, "stdout")  # make test-tutorials-plugins: measured, not documented
        assert "H100: {" in out and "V100: {" in out and "documented" not in out, out[-2000:]
    # A hang guard, not a speed target: the time of each tutorial is recorded in
    # build/notebook-times.json and the 5-minute budget for all of them is tracked in
    # docs/tutorials.md from measured runs (a timing assertion here failed on a busy machine).
    assert seconds < 600, f"{path.name} took {seconds:.0f} s"
