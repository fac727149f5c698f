"""Execute a tutorial as a user would: in a kernel of this test's own interpreter, with JAX free
to start every backend installed (JAX_PLATFORMS unset: with the ``[tpu]`` extra or the CUDA
plugin on a machine without that device, their start-up must not leak into the notebook), and
record how long it took in ``build/notebook-times.json``.

Each tutorial runs once per test session: the notebooks with a test module of their own
(``DEDICATED``) are executed there, every other one by ``test_tutorials.py``. Every run checks,
just before each claim's cell, that the claim's cause holds (``claims``: the probes).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient

from .claims import Claim, load, tags_in

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
TIMES = ROOT / "build" / "notebook-times.json"
#: Tutorials with a test module of their own, which executes them (and checks more).
DEDICATED = {
    "09_where_the_time_goes": "test_tutorial_profile.py",
    "10_will_it_fit": "test_tutorial_memory.py",
    "13_inside_the_loop": "test_tutorial_loops.py",
}
#: What must never appear in a tutorial's output: a traceback, libtpu's or a plugin's start-up
#: noise (seen with the [tpu] extra / CUDA plugin and no device before %load_ext captured it),
#: JAX's persistent-cache log lines (seen while nbcompile explained recompiles).
NOISE = re.compile(
    r"Traceback|Source Location Trace|E0000 |W0000 |Jax plugin configuration error"
    r"|TPU_ACCELERATOR_TYPE|Unable to initialize backend"
    r"|(?i:persistent compilation cache|persistent cache entry)"
)
# The test process runs JAX on the CPU; the kernels see what a user's notebook sees.
_TEST_ONLY_ENV = ("JAX_PLATFORMS", "TF_CPP_MIN_LOG_LEVEL")


def _kernel_manager(work: Path) -> AsyncKernelManager:
    """A kernel of this interpreter (``python`` in a kernel spec means ``sys.executable``) with
    this process's environment (``make test-tutorials-plugins`` adds the CUDA plugin's folder to
    ``PYTHONPATH``), whatever kernel specs are installed."""
    spec = work / "kernels" / "nbcompile-tests"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [
                    "python",
                    "-Xfrozen_modules=off",
                    "-m",
                    "ipykernel_launcher",
                    "-f",
                    "{connection_file}",
                ],
                "display_name": "nbcompile tests",
                "language": "python",
            }
        )
    )
    ksm = KernelSpecManager(kernel_dirs=[str(spec.parent)], ensure_native_kernel=False)
    return AsyncKernelManager(kernel_name="nbcompile-tests", kernel_spec_manager=ksm)


PROBE = "# probe (tests/notebooks/claims): the cause of claim {slug}\n"


def claims_of(path: Path) -> list[Claim]:
    """The claims of the notebook at ``path`` (its two-digit prefix)."""
    return [c for c in load() if c.notebook == path.stem[:2]]


def _probe(claim: Claim, present: bool) -> nbformat.NotebookNode:
    """A cell asserting that ``claim``'s cause is present (as written) or absent (ablated)."""
    test = f"({claim.cause})" if present else f"not ({claim.cause})"
    state = "absent from the notebook as written" if present else "still there after the ablation"
    source = (
        PROBE.format(slug=claim.slug)
        + f"assert {test}, {f'claim {claim.id}: its cause is {state}'!r}"
    )
    return nbformat.v4.new_code_cell(source)


def with_probes(nb: nbformat.NotebookNode, claims: list[Claim]) -> nbformat.NotebookNode:
    """``nb`` with a probe cell (cause present) before the cell of each of ``claims``."""
    by_slug = {c.slug: c for c in claims}
    cells = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            cells.extend(_probe(by_slug[t], True) for t in tags_in(cell.source) if t in by_slug)
        cells.append(cell)
    nb.cells = cells
    return nb


def execute(path: Path, work: Path, timeout: int = 300) -> tuple[nbformat.NotebookNode, float]:
    """Run the notebook at ``path`` in a copy under ``work``, with the claims' cause probes;
    returns it executed and the seconds it took (kernel start included)."""
    copy = work / path.name
    shutil.copy(path, copy)
    nb = with_probes(nbformat.read(copy, as_version=4), claims_of(path))
    env = {k: v for k, v in os.environ.items() if k not in _TEST_ONLY_ENV}
    start = time.perf_counter()
    client = NotebookClient(
        nb,
        km=_kernel_manager(work),
        timeout=timeout,
        allow_errors=False,
        resources={"metadata": {"path": str(work)}},
    )
    client.execute(env=env, cleanup_kc=True)  # shut the kernel down: the manager is ours
    seconds = time.perf_counter() - start
    TIMES.parent.mkdir(exist_ok=True)
    times = json.loads(TIMES.read_text()) if TIMES.exists() else {}
    times[path.stem] = round(seconds, 1)
    TIMES.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")
    return nb, seconds


def execute_after_imports(
    path: Path, work: Path, imports: str, added: str, name: str
) -> nbformat.NotebookNode:
    """Run a copy of the notebook at ``path`` (as :func:`execute`, saved as ``name``) with
    ``added`` run right after ``imports`` in its first code cell (which must hold them: a
    patch of the session, such as calibrations made on a busy machine); returns it executed,
    checked free of tracebacks and start-up noise."""
    nb = nbformat.read(path, as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert imports in first.source, f"{path.name}: its first code cell lost {imports!r}"
    first.source = first.source.replace(imports, imports + added)
    patched = work / "src" / name
    patched.parent.mkdir(exist_ok=True)
    nbformat.write(nb, patched)
    ran, _ = execute(patched, work)
    assert noise(ran) == [], noise(ran)
    return ran


def outputs_text(nb: nbformat.NotebookNode, name: str | None = None) -> str:
    """Every text output (streams ``name`` only when given; else streams, errors and plain-text
    results) of the executed notebook, joined."""
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream" and name in (None, o.get("name")):
                out.append(o["text"])
            elif name is None and o.get("output_type") == "error":
                out.append("\n".join(o.get("traceback", [])))
            elif name is None:
                out.append(o.get("data", {}).get("text/plain", ""))
    return "".join(out)


def noise(nb: nbformat.NotebookNode) -> list[str]:
    """Lines of the outputs that are a traceback or backend start-up noise."""
    text = outputs_text(nb)
    return [line for line in text.splitlines() if NOISE.search(line)]


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def execute_ablated(
    path: Path, work: Path, claim: Claim, timeout: int = 300
) -> tuple[str | None, str | None]:
    """Run a copy of the notebook at ``path`` with ``claim``'s cause removed: each ``old`` of
    its ablation swapped for its ``new`` in the code cells (each must occur, else the ablation
    would test nothing), and only the cells up to the claim's (of those, just the first code
    cell, the cells holding a string of ``only`` when given, and the claim's own), with a probe
    before the claim's cell asserting that the cause is gone.

    Returns (the probe's error, the claim cell's ANSI-free traceback): ``None`` for what passed.
    An error in an earlier cell fails the run (the ablation broke the notebook, not the claim),
    and so does one in a clean-up cell."""
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    for old, new in claim.ablation.replace.items():
        hits = [c for c in code if old in c.source]
        assert hits, f"{path.name}: nothing to replace for {old!r}"
        assert new != old, f"{path.name}: the ablation leaves {old!r} as it is"
        for cell in hits:
            cell.source = cell.source.replace(old, new)
    last = next(i for i, c in enumerate(code) if claim.slug in tags_in(c.source))
    only = claim.ablation.only
    nb.cells = [
        c
        for i, c in enumerate(code[: last + 1])
        if i in (0, last) or only is None or any(s in c.source for s in only)
    ]
    nb.cells.insert(len(nb.cells) - 1, _probe(claim, present=False))
    n = len(nb.cells)  # the probe at n - 2, the claim at n - 1, then the clean-up cells
    nb.cells += [c for c in code[last + 1 :] if any(s in c.source for s in claim.ablation.cleanup)]
    env = {k: v for k, v in os.environ.items() if k not in _TEST_ONLY_ENV}
    client = NotebookClient(
        nb,
        km=_kernel_manager(work),
        timeout=timeout,
        allow_errors=True,
        resources={"metadata": {"path": str(work)}},
    )
    client.execute(env=env, cleanup_kc=True)
    errors = {
        i: ANSI.sub("", "\n".join(o["traceback"]))
        for i, c in enumerate(nb.cells)
        for o in c.outputs
        if o.get("output_type") == "error"
    }
    early = {i: tb[-1500:] for i, tb in errors.items() if i < n - 2 or i >= n}
    assert not early, f"{path.name}: an earlier cell failed with the ablation: {early}"
    return errors.get(n - 2), errors.get(n - 1)
