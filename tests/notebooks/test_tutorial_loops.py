"""Tutorial 13 "Inside the loop" runs in a real kernel, checks its claims in its own assertion
cells (predicted first, then measured) and prints what it measures.

Its claims are kept here, apart from ``test_tutorials.CLAIMS`` (the first twelve tutorials'):
each claim names the assertion that would fail if it were false."""

from __future__ import annotations

import nbformat
import pytest

from ._run import ROOT, execute, execute_ablated, noise, outputs_text

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

# (the claim's assertion that must fail, {code: code with the cause removed}, cells needed
#  besides the first one — as test_claims_ablated.ABLATIONS does for tutorials 01-12)
ABLATIONS = [
    (
        # the body runs twice per XLA iteration: its kernels no longer run once per layer
        "assert own and all(counts[k] == LAYERS for k in own)",
        {
            "(stack, jnp.arange(LAYERS)))\n    return h": "(stack, jnp.arange(LAYERS)), unroll=2)\n    return h"
        },
        ("%%compile", "c = forward.compilation", "p = c.profile"),
    ),
    (
        # the wide branch does no more than the narrow one
        "assert min(wide) > 2 * statistics.median(narrow) and measured > predicted / 2",
        {
            "for _ in range(8):": "for _ in range(0):",
            "assert branch": "pass",
            "assert 8 < predicted < 10": "pass",
            "assert sorted(slowest) == wide_layers": "pass",
        },
        None,
    ),
    (
        # no lax.cond in the layer: only its own two arrays per layer are kept
        "assert predicted_layer <= per_layer < 2 * predicted_layer and written[-1] == LAYERS * per_layer",
        {
            "return jax.lax.cond(i % 4 == 3, wide, lambda h: h, h)": "return h",
            'assert bwd_loop.reverse and m.peak_source == "estimate" and "branch" in m.notes[-1]': "pass",
        },
        ("%%compile --profile", "%%compile --grad", "g = loss.compilation"),
    ),
    (
        # no unroll reaches JAX: XLA's loop runs once per layer whatever k says
        "assert runs[k][1].xla_trip_count == LAYERS // k",
        {"unroll=k)[0]": "unroll=1)[0]"},
        ("%%compile", "def forward_unrolled"),
    ),
]

pytestmark = pytest.mark.kernel


def test_every_claim_is_checked_with_its_cause_removed():
    claimed = {code for checks in CLAIMS.values() for code in checks}
    assert all(code in claimed for code, _, _ in ABLATIONS)
    assert all(any(code in checks for code, _, _ in ABLATIONS) for checks in CLAIMS.values())


@pytest.mark.parametrize("case", ABLATIONS, ids=[f"13-{i}" for i in range(len(ABLATIONS))])
def test_the_claims_assertion_fails_without_its_cause(case, tmp_path):
    code, replace, only = case
    traceback = execute_ablated(NOTEBOOK, tmp_path, replace, until=code, only=only)
    assert traceback is not None, f"{code!r} held with its cause removed"
    assert "AssertionError" in traceback and code in traceback, traceback[-2000:]


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
