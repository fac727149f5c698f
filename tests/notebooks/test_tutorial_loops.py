"""Tutorial 13 "Inside the loop" runs in a real kernel, checks its claims in its own assertion
cells (predicted first, then measured) and prints what it measures.

``CLAIMS`` here groups its assertions by what they teach; the tagged ones (``# claim: SLUG``)
are in ``tests/notebooks/claims/nb13.py`` with the ablation that removes each one's cause, run
by ``test_claims_ablated.py`` like every tutorial's."""

from __future__ import annotations

import nbformat
import pytest

from ._run import ROOT, execute, noise, outputs_text

NOTEBOOK = ROOT / "notebooks" / "13_inside_the_loop.ipynb"
CLAIMS = {
    "XLA compiles a loop's body once and runs it once per iteration": [
        'assert (loop.kind, loop.trip_count, loop.line) == ("scan", LAYERS, scan_line)',
        "assert own and all(counts[k] == LAYERS for k in own)",
        "assert branch",
    ],
    "the time of each iteration is measured: the slow layers are the wide ones": [
        "assert 8 < predicted < 10",
        "assert sorted(slowest) == wide_layers",
        "assert min(wide) > 2 * statistics.median(narrow) and measured > predicted / 2",
        "assert abs(t.iteration_seconds / t.total_seconds - 1) < 0.1",
        'assert set(rows) == {f"layer[{i}]" for i in range(LAYERS)}',
    ],
    "a scan's residuals fill its stacks one layer per forward iteration and empty through the "
    "backward; a lax.cond keeps its wide branch's residuals in every iteration": [
        "assert all(b > a for a, b in zip(written, written[1:])) and all(b < a for a, b in zip(unread, unread[1:]))",
        "assert written[-1] == unread[0]",
        "assert predicted_layer <= per_layer < 2 * predicted_layer and written[-1] == LAYERS * per_layer",
    ],
    "unroll=k puts k bodies in each of LAYERS / k iterations; XLA's cost counts a body once": [
        "assert runs[k][1].xla_trip_count == LAYERS // k",
        'assert runs["full"][1].whiles == [] and "unrolled by JAX" in runs["full"][1].changes[0]',
        'assert abs(runs[k][0].cost["flops"] * (LAYERS // k) / true_flops - 1) < 0.01',
        "assert len(tk.iterations) == LAYERS // k",
    ],
}

pytestmark = pytest.mark.kernel


def test_each_claim_has_its_assertion_cell():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    asserts = [c.source for c in nb.cells if c.cell_type == "code" and "assert" in c.source]
    for claim, checks in CLAIMS.items():
        for code in checks:
            assert any(code in cell for cell in asserts), (claim, code)


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    return execute(NOTEBOOK, tmp_path_factory.mktemp("nb"))


def test_tutorial_runs_checks_its_claims_and_prints_its_measurements(executed):
    nb, seconds = executed
    assert noise(nb) == [], noise(nb)
    out = outputs_text(nb, "stdout")
    for printed in ("scan × 8 · line", "predicted ratio", "measured ratio", "layer[3]", "unroll="):
        assert printed in out, printed
    assert seconds < 300, f"took {seconds:.0f} s"
