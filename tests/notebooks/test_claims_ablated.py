"""Each claim's assertion would fail if the claim were false: the notebook runs (up to that
assertion, with only the cells it needs) with the claim's cause removed, as its entry in
``tests/notebooks/claims`` says. Two things must then happen: the probe before the claim's cell
sees the cause gone (so the ablation removed the cause, not something else — never a thing
compared with itself), and the claim's assertion raises.

A kernel per claim; the cells run are the cheap part of a tutorial (docs/tutorials.md)."""

from __future__ import annotations

import importlib.util
import re

import pytest

from ._run import ROOT, execute_ablated
from .claims import load

CLAIMS = load()
#: notebooks planned for a deviceless TPU need libtpu, as their own tests do
NEEDS_LIBTPU = {"05", "10"}

pytestmark = pytest.mark.kernel


@pytest.mark.parametrize("claim", CLAIMS, ids=[c.id for c in CLAIMS])
def test_the_claims_assertion_fails_without_its_cause(claim, tmp_path):
    if claim.notebook in NEEDS_LIBTPU and importlib.util.find_spec("libtpu") is None:
        pytest.skip('plans for a deviceless TPU: needs libtpu ("nbcompile[tpu]")')
    path = next((ROOT / "notebooks").glob(f"{claim.notebook}_*.ipynb"))
    probe, traceback = execute_ablated(path, tmp_path, claim)
    assert probe is None, f"{claim.id}: the ablation left the cause in place\n{probe[-1500:]}"
    assert traceback is not None, f"{claim.id}: the assertion held with its cause removed"
    # the cell's line that raised (IPython marks it ---->, or ---> before a two-digit line; a
    # call into numpy's testing adds its own frames) is the claim's own, not a neighbour
    raised = [ln for ln in traceback.splitlines() if re.match(r"\s*-+>\s*\d", ln)]
    assert "AssertionError" in traceback and raised, traceback[-2000:]
    assert any(f"claim: {claim.slug}" in ln for ln in raised), traceback[-2000:]
