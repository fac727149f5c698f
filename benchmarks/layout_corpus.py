"""The fixed corpus of reports the graph layout is measured on (``python -m benchmarks.layout_corpus``).

Every tutorial notebook (each report a ``%%compile`` cell displays, dumped from inside the
kernel), the 2/12/24-layer transformer train steps of :mod:`benchmarks.models`, and the
Flax / Equinox / Keras / JAX example models of ``tests/realmodels`` (forward and ``--grad``,
run as cells in an IPython shell, as a notebook user does). Reports are written as JSON under
``build/layout-corpus/`` (regenerable, not committed); :mod:`benchmarks._layout` reads them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "layout-corpus"
TRAIN_STEPS = ("2-layer train", "12-layer train", "24-layer train")

#: First cell injected into each tutorial: every report a compilation builds is dumped.
_DUMP_CELL = """
import json as _j, pathlib as _p, nbcompile.compilation as _cm
_nbc_out = _p.Path({out!r}); _nbc_ids = {{}}
_nbc_report = _cm.Compilation.report
def _nbc_dump(self):
    r = _nbc_report(self)
    k = _nbc_ids.setdefault(id(self), len(_nbc_ids))
    (_nbc_out / f"{stem}-{{k:02d}}-{{r['name']}}.json").write_text(_j.dumps(r))
    return r
_cm.Compilation.report = _nbc_dump
_nbc_all = []
_nbc_init = _cm.Compilation.__init__
def _nbc_keep(self, *a, **k):
    _nbc_init(self, *a, **k)
    _nbc_all.append(self)
_cm.Compilation.__init__ = _nbc_keep
"""
#: Last cell: compilations no cell displayed (``-q``, targets) are reported too.
_FLUSH_CELL = """
for _c in _nbc_all:
    try:
        _c.report()
    except Exception as _e:  # a compile-only planning object may have nothing to report
        print("no report:", _c.name, _e)
"""


def tutorials(out: Path, only: str | None = None) -> None:
    import nbformat
    from nbclient import NotebookClient

    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        if only and only not in path.stem:
            continue
        nb = nbformat.read(path, as_version=4)
        nb.cells.insert(
            0, nbformat.v4.new_code_cell(_DUMP_CELL.format(out=str(out), stem=path.stem[:2]))
        )
        nb.cells.append(nbformat.v4.new_code_cell(_FLUSH_CELL))
        work = out / "_work"
        work.mkdir(exist_ok=True)
        print("tutorial", path.stem, flush=True)
        NotebookClient(
            nb,
            kernel_name="python3",
            timeout=600,
            allow_errors=True,
            resources={"metadata": {"path": str(work)}},
        ).execute()


def train_steps(out: Path) -> None:
    import nbcompile
    from benchmarks._extra_models import build

    for name in TRAIN_STEPS:
        print("model", name, flush=True)
        fn, args = build(name)
        report = nbcompile.compile(fn, *args).report()
        (out / f"bench-{name.replace(' ', '_')}.json").write_text(json.dumps(report))


def real_models(out: Path) -> None:
    import jax
    from IPython.testing.globalipapp import start_ipython

    import nbcompile

    sys.path.insert(0, str(ROOT))
    from tests.realmodels._cases_equinox import CASES as EQUINOX
    from tests.realmodels._cases_flax import CASES as FLAX
    from tests.realmodels._cases_keras import CASES as KERAS

    jax.config.update("jax_numpy_dtype_promotion", "standard")
    jax.config.update("jax_numpy_rank_promotion", "allow")
    shell = start_ipython()
    shell.run_line_magic("load_ext", "nbcompile")
    for case in [*FLAX, *EQUINOX, *KERAS]:
        print("real model", case.name, flush=True)
        shell.reset(new_session=False)
        for text in case.cells:
            assert shell.run_cell(text).success, case.name
        for tag, options, call in (
            ("fwd", "", case.forward),
            ("grad", f"--grad {case.grad}", case.loss),
        ):
            res = shell.run_cell(f"%%compile -q {options}\n{call}\n")
            if not res.success:
                print("  failed:", tag, res.error_in_exec, flush=True)
                continue
            report = nbcompile.last().report()
            (out / f"real-{case.name}-{tag}.json").write_text(json.dumps(report))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--only", choices=("tutorials", "train", "real"), default=None)
    p.add_argument("--tutorial", default=None, help="only tutorials whose name contains this")
    args = p.parse_args()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ["KERAS_BACKEND"] = "jax"
    OUT.mkdir(parents=True, exist_ok=True)
    if args.only in (None, "train"):
        train_steps(OUT)
    if args.only in (None, "real"):
        real_models(OUT)
    if args.only in (None, "tutorials"):
        tutorials(OUT, args.tutorial)


if __name__ == "__main__":
    main()
