"""The claims the tutorials teach, one module per notebook (``nbNN.py``, each a ``CLAIMS`` list).

A claim is one assertion line in a notebook, tagged ``# claim: SLUG``. Its entry here says what
the claim is, what causes it (``cause``: a Python expression, evaluated in the notebook's kernel
just before the claim's cell, that holds in the notebook as written) and how to remove that
cause (``ablation``: code swapped in the notebook's cells). The tests check that

* every tag in a notebook has an entry here and every entry a tag (``test_claims.py``);
* as written, the cause holds before each claim's cell (``_run.execute`` adds the probes);
* with the ablation applied the cause no longer holds *and* the claim's assertion fails
  (``test_claims_ablated.py``): the change removed the cause, not something else, and the
  assertion would catch a notebook where the claim were false;
* a claim that something does *not* happen names its positive control (``control``): an
  assertion in the same notebook that sees the thing happen where its cause is present.

A new notebook adds its own ``nbNN.py`` here; nothing else needs to change.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path

TAG = re.compile(r"#\s*claim:\s*([a-z0-9][a-z0-9-]*)")


@dataclass(frozen=True)
class Ablation:
    """The claim's cause removed: each key of ``replace`` swapped for its value in the code
    cells (each must occur); ``only``: besides the first code cell and the claim's own cell,
    run just the cells holding one of these strings (None: every cell up to the claim);
    ``cleanup``: later cells run after the claim's, whatever happened."""

    replace: dict[str, str]
    why: str
    only: tuple[str, ...] | None = None
    #: cells after the claim's run all the same, holding one of these strings (shutting down
    #: what the notebook started: tutorial 12's processes)
    cleanup: tuple[str, ...] = ()


@dataclass(frozen=True)
class Claim:
    """One taught claim: ``notebook`` ("03"), ``slug`` (its tag), ``text`` (in words),
    ``cause`` (expression true before the claim's cell as written, false once ablated),
    ``ablation``; ``control``: for a claim that something does not happen, the code of the
    assertion in the same notebook that shows it happening; ``window``: the tolerance and the
    measured spread that set it (for a measured claim)."""

    notebook: str
    slug: str
    text: str
    cause: str
    ablation: Ablation
    control: str | None = None
    window: str = ""

    @property
    def id(self) -> str:
        return f"{self.notebook}-{self.slug}"


def load() -> list[Claim]:
    """Every claim of every notebook module in this package, in notebook order."""
    claims: list[Claim] = []
    folder = Path(__file__).parent
    for info in sorted(pkgutil.iter_modules([str(folder)]), key=lambda m: m.name):
        if re.fullmatch(r"nb\d\d", info.name):
            module = importlib.import_module(f"{__name__}.{info.name}")
            found = list(module.CLAIMS)
            assert all(c.notebook == info.name[2:] for c in found), info.name
            claims.extend(found)
    return claims


def tags_in(source: str) -> list[str]:
    """The claim tags in a cell's source, in order."""
    return TAG.findall(source)
