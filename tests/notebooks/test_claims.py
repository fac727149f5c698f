"""The claims list (``tests/notebooks/claims``) and the notebooks agree, without running them:
every claim tagged in a notebook has an entry with an ablation, every entry a tag; each ablation
changes code that is there; a claim that something does not happen names a positive control
that is there; every notebook has claims, a "predict first" exercise answered in a hidden cell,
and the raw JAX call beside the nbcompile accessors it uses; docs/tutorials.md lists every
claim. (Running the ablations and the cause probes is ``test_claims_ablated.py``'s and the
notebook runs' job.)"""

from __future__ import annotations

import re
from collections import Counter

import nbformat
import pytest

from ._run import NOTEBOOKS, ROOT
from .claims import load, tags_in

CLAIMS = load()
BOOKS = {p.stem[:2]: nbformat.read(p, as_version=4) for p in NOTEBOOKS}


def _code(nb: nbformat.NotebookNode) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "code"]


def test_claim_slugs_are_unique_per_notebook():
    counts = Counter(c.id for c in CLAIMS)
    assert [k for k, n in counts.items() if n > 1] == []


@pytest.mark.parametrize("number", sorted(BOOKS))
def test_every_claim_in_the_notebook_is_in_the_claims_list(number):
    tagged = [t for src in _code(BOOKS[number]) for t in tags_in(src)]
    listed = [c.slug for c in CLAIMS if c.notebook == number]
    assert tagged, f"notebook {number} tags no claim (# claim: SLUG on its assertion line)"
    assert len(tagged) == len(set(tagged)), f"a tag used twice in {number}: {tagged}"
    assert sorted(tagged) == sorted(listed), (number, set(tagged) ^ set(listed))


def test_every_listed_claim_belongs_to_a_notebook():
    assert {c.notebook for c in CLAIMS} <= set(BOOKS)


@pytest.mark.parametrize("claim", CLAIMS, ids=[c.id for c in CLAIMS])
def test_each_claim_is_an_assertion_with_an_ablation_that_changes_its_notebook(claim):
    code = _code(BOOKS[claim.notebook])
    (line,) = [ln for src in code for ln in src.splitlines() if claim.slug in tags_in(ln)]
    assert line.lstrip().startswith(("assert ", "np.testing.assert")), line
    assert claim.cause.strip() and claim.text.strip() and claim.ablation.why.strip()
    assert claim.ablation.replace, claim.id
    for old, new in claim.ablation.replace.items():
        assert old != new, (claim.id, old)
        assert any(old in src for src in code), (claim.id, old)


@pytest.mark.parametrize(
    "claim", [c for c in CLAIMS if c.control], ids=[c.id for c in CLAIMS if c.control]
)
def test_a_claim_that_nothing_happens_has_its_positive_control(claim):
    asserts = [
        ln for src in _code(BOOKS[claim.notebook]) for ln in src.splitlines() if "assert" in ln
    ]
    assert any(claim.control in ln for ln in asserts), (claim.id, claim.control)


@pytest.mark.parametrize("number", sorted(BOOKS))
def test_each_notebook_has_a_predict_first_exercise_answered_in_a_hidden_cell(number):
    cells = BOOKS[number].cells
    asks = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and "**Predict" in c.source]
    assert asks, f"notebook {number} has no '**Predict first.**' exercise"
    for i in asks:
        answer = next(
            (c for c in cells[i + 1 :] if "hide-input" in c.metadata.get("tags", [])), None
        )
        assert answer is not None and answer.cell_type == "code", number
        assert answer.metadata.get("jupyter", {}).get("source_hidden") is True, number
        assert "assert" in answer.source, f"notebook {number}: the hidden answer checks nothing"


# nbcompile accessor (a regex on the notebook's code) -> the raw JAX calls that give the same
# figure (any one of them): jax.jit(f).lower(...).compile() by hand, or JAX's own Compiled
# object that nbcompile holds (c.compiled)
RAW = {
    r"\.cost\[": ("cost_analysis()",),
    r"\.memory_map\b|\.memory\b": ("memory_analysis()",),
    r"\.hlo\b": (".as_text()",),
    r"\bnbcompile\.compile\(|%%compile": (".lower(", ".compiled."),
}


@pytest.mark.parametrize("number", sorted(BOOKS))
def test_the_raw_jax_call_is_beside_each_accessor(number):
    source = "\n".join(_code(BOOKS[number]))
    missing = [
        raw
        for acc, raw in RAW.items()
        if re.search(acc, source) and not any(r in source for r in raw)
    ]
    assert missing == [], f"notebook {number} uses an accessor without its raw JAX call {missing}"


def test_docs_list_every_claim():
    text = (ROOT / "docs" / "tutorials.md").read_text()
    missing = [c.id for c in CLAIMS if f"`{c.slug}`" not in text]
    assert missing == []
