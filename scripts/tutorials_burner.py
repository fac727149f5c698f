"""Time the tutorials on a busy machine: a measurement of issue 44's budget, not a test.

    python scripts/tutorials_burner.py              # a CPU burner per core, the set twice
    python scripts/tutorials_burner.py --rounds 1 --no-burner --only 10 13

Starts one busy process per core (``--no-burner``: none), runs every tutorial in
``notebooks/`` through the runner the tests use (``tests/notebooks/_run.execute``: a real
kernel of this interpreter, the claims' cause probes, the same environment), ``--rounds`` times,
and prints each notebook's time, pass or fail, each round's total and the load average. Each
round gets a fresh, empty JAX persistent cache (``NBCOMPILE_CACHE_DIR``), as a test session
does (tests/conftest.py): no round is sped up by an earlier one's compiles. The burners are
killed at the end, on a failure or an interrupt too. Exit status 1 if any notebook failed.

The budget (issue 44): the whole set passes twice with the burner beside it, each round inside
5 minutes (``--budget``). Timing is never asserted by the test suite; this script reports it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.notebooks._run import ANSI, NOTEBOOKS, execute, noise  # noqa: E402

BURN = "while True: pass"
LOGS = ROOT / "build" / "tutorials-burner"


def start_burners(n: int) -> list[subprocess.Popen[bytes]]:
    """``n`` processes each spinning one core, at normal priority."""
    return [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(n)]


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """Kill exactly the burners this script started (by their own handles)."""
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait()


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def slowest_cells(nb: Any, n: int) -> list[str]:
    """The ``n`` slowest code cells of an executed notebook (nbclient's timestamps), with
    their first line."""
    timed = []
    for cell in nb.cells:
        ex = cell.get("metadata", {}).get("execution", {})
        t0, t1 = ex.get("iopub.execute_input"), ex.get("shell.execute_reply")
        if cell.cell_type == "code" and t0 and t1:
            seconds = (datetime.fromisoformat(t1) - datetime.fromisoformat(t0)).total_seconds()
            first = next((ln for ln in cell.source.splitlines() if ln.strip()), "")
            timed.append((seconds, first[:70]))
    return [f"{s:6.1f} s  {line}" for s, line in sorted(timed, reverse=True)[:n]]


def failure(e: Exception) -> str:
    """The failed line and error of a cell (IPython marks the line ---->), on one line."""
    text = ANSI.sub("", str(e)).strip().splitlines()
    marked = [ln.strip() for ln in text if re.match(r"\s*-+>\s*\d", ln)]
    tail = " | ".join(ln.strip() for ln in text[-3:] if ln.strip())
    return f"{type(e).__name__}: {(marked[-1] + ' | ') if marked else ''}{tail}"[:400]


def run_round(paths: list[Path], timeout: int, cells: int = 0) -> list[tuple[str, float, str]]:
    """Each notebook executed once, with a fresh persistent cache for the round; returns
    (name, seconds, "pass" or the failure)."""
    cache = tempfile.mkdtemp(prefix="nbcompile-burner-cache-")
    os.environ["NBCOMPILE_CACHE_DIR"] = cache  # the kernels inherit this process's environment
    rows = []
    try:
        for path in paths:
            work = Path(tempfile.mkdtemp(prefix=f"nb{path.stem[:2]}-"))
            start = time.perf_counter()
            try:
                nb, seconds = execute(path, work, timeout=timeout)
                bad = noise(nb)
                verdict = "pass" if not bad else f"FAIL: noise {bad[:2]}"
                slow = slowest_cells(nb, cells)
            except Exception as e:  # a failed cell, a timeout: reported, the round goes on
                seconds = time.perf_counter() - start
                verdict, slow = f"FAIL: {failure(e)}", []
                LOGS.mkdir(parents=True, exist_ok=True)
                log = LOGS / f"{path.stem}-{time.strftime('%H%M%S')}.txt"
                log.write_text(ANSI.sub("", f"{type(e).__name__}: {e}"))
                slow = [f"the whole error: {log.relative_to(ROOT)}"]
            finally:
                shutil.rmtree(work, ignore_errors=True)
            rows.append((path.stem, seconds, verdict))
            print(f"  {path.stem:28s} {seconds:6.1f} s  {verdict}  (load {load()})", flush=True)
            for line in slow:
                print(f"      {line}", flush=True)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-burner", action="store_true", help="run without the CPU burner")
    ap.add_argument("--burners", type=int, default=os.cpu_count() or 1, help="default: a core each")
    ap.add_argument("--only", nargs="*", help="notebook prefixes, e.g. 10 13")
    ap.add_argument("--timeout", type=int, default=600, help="per cell, as the tests allow")
    ap.add_argument("--cells", type=int, default=0, help="print each notebook's N slowest cells")
    ap.add_argument("--budget", type=float, default=300.0, help="seconds a round may take")
    args = ap.parse_args(argv)
    paths = [p for p in NOTEBOOKS if not args.only or p.stem[:2] in args.only]
    os.environ.pop("JAX_PLATFORMS", None)  # the runner unsets it for the kernels anyway

    import jax
    import jaxlib

    print(
        f"stack: Python {sys.version.split()[0]}, jax {jax.__version__}, jaxlib "
        f"{jaxlib.__version__}; {os.cpu_count()} cores; load before {load()}",
        flush=True,
    )
    # SIGTERM (a timeout's kill) becomes an exception, so the finally below stops the burners
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    burners = [] if args.no_burner else start_burners(args.burners)
    print(f"burners: {len(burners)} busy process(es) {[p.pid for p in burners]}", flush=True)
    rounds = []
    try:
        for r in range(args.rounds):
            print(f"round {r + 1}:", flush=True)
            t0 = time.perf_counter()
            rows = run_round(paths, args.timeout, args.cells)
            rounds.append((rows, time.perf_counter() - t0))
    finally:
        stop(burners)
    ok = True
    print(f"\nload after {load()}")
    names = [p.stem for p in paths]
    print(f"{'notebook':28s} " + " ".join(f"round {i + 1:<3d}" for i in range(len(rounds))))
    for i, name in enumerate(names):
        print(f"{name:28s} " + " ".join(f"{rows[i][1]:7.1f} s " for rows, _ in rounds))
    for i, (rows, wall) in enumerate(rounds):
        failed = [n for n, _, v in rows if v != "pass"]
        total = sum(s for _, s, _ in rows)
        within = total <= args.budget
        ok = ok and not failed and within
        print(
            f"round {i + 1}: {len(rows) - len(failed)}/{len(rows)} passed, notebooks {total:.1f} s "
            f"(wall {wall:.1f} s), {'within' if within else 'OVER'} the {args.budget:.0f} s budget"
            + (f"; failed: {', '.join(failed)}" if failed else "")
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
