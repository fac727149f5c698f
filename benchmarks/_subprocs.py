"""Figures that need fresh processes: frozen-model first call, ``%%compile`` re-run, jaxviz.

Workers (``benchmarks._workers``) time themselves and hand back JSON, so Python start-up and
imports are never part of a figure.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks._extra_models import build
from benchmarks._stats import Row, Target, ratio_at_most

__all__ = [
    "PEER_DIR",
    "frozen_first_call",
    "jaxviz_sizes",
    "magic_rerun",
    "moved_code",
    "run_module",
    "run_worker",
]

ROOT = Path(__file__).resolve().parent.parent
PEER_DIR = Path(__file__).resolve().parent / "out" / ".peer-venv"  # git-ignored
JAXVIZ_PIN = "jaxviz==0.1.4"


class WorkerError(RuntimeError):
    pass


def run_module(module: str, *args: str, timeout: float = 1800) -> Any:
    """Run ``python -m module args...`` in a fresh interpreter (JAX on CPU, this checkout first
    on the path); its last line of output is JSON, returned decoded."""
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
        cwd=ROOT,
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip().splitlines()[-1] if proc.stderr else "failed")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_worker(
    kind: str, *args: str, timeout: float = 600, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run one worker in a fresh interpreter and return its JSON result."""
    with tempfile.TemporaryDirectory(prefix="nbc-bench-") as tmp:
        result = Path(tmp) / "result.json"
        full_env = {
            **os.environ,
            "JAX_PLATFORMS": "cpu",
            "TF_CPP_MIN_LOG_LEVEL": "3",
            "IPYTHONDIR": str(Path(tmp) / "ipython"),
            "NBCOMPILE_CACHE_DIR": str(Path(tmp) / "jax-cache"),
            **(env or {}),
        }
        full_env.pop("JAX_COMPILATION_CACHE_DIR", None)
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks._workers", kind, str(result), *args],
            cwd=ROOT,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0 or not result.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise WorkerError(f"worker {kind} failed (rc {proc.returncode}): " + " | ".join(tail))
        return json.loads(result.read_text())


def frozen_first_call(model: str, pairs: int, workdir: Path) -> Row:
    """``nbcompile.load(path)(x)`` vs ``jax.jit(f)(*args)``, each the first call of a fresh process.

    The row is a file this machine has checked before (frozen here: ``freeze`` records its
    program as checked, so ``load`` skips the forked probe; docs/format.md "Checked
    programs"). The same file loaded as if it came from elsewhere (records off: probed in a
    child, custom calls checked, lowered and shape-refined in a child before the first call) is
    timed in the same interleaved rounds and reported in the
    note and ``extra["foreign_file"]``.
    """
    import nbcompile

    row = Row(
        "frozen load+1st call",
        model,
        "s",
        "load(path)(x), fresh process",
        "jit(f) 1st call, fresh process",
        target=ratio_at_most(1.2),
        note=f"{pairs} pairs of fresh processes, timed inside each",
    )
    fn, args = build(model)
    path = workdir / f"{model.replace(' ', '_')}.nbc"
    records = {"NBCOMPILE_CHECKED_DIR": str(workdir / "checked-programs")}
    unchecked = {"NBCOMPILE_CHECKED_DIR": "off"}
    saved = os.environ.get("NBCOMPILE_CHECKED_DIR")
    os.environ.update(records)  # freeze records its program in the workers' folder
    try:
        result = nbcompile.freeze(fn, *args, path=path)
    except Exception as exc:  # a freeze bug must show in the table, not kill the run
        row.note = f"freeze failed: {type(exc).__name__}: {exc}"[:200]
        return row
    finally:
        if saved is None:
            os.environ.pop("NBCOMPILE_CHECKED_DIR", None)
        else:
            os.environ["NBCOMPILE_CHECKED_DIR"] = saved
    row.extra["file_bytes"] = result.file_bytes
    row.extra["platforms"] = list(result.platforms)
    subj: list[float] = []
    anch: list[float] = []
    foreign: list[float] = []
    parts: dict[str, list[float]] = {}
    try:
        for i in range(pairs):
            sides = [
                (subj, ("frozen-first-call", model, str(path)), records),
                (anch, ("jit-first-call", model), None),
                (foreign, ("frozen-first-call", model, str(path)), unchecked),
            ]
            for out, argv, env in sides if i % 2 == 0 else sides[::-1]:
                result = run_worker(*argv, env=env)
                out.append(result["seconds"])
                for part in ("import_seconds", "load_seconds", "call_seconds"):
                    if part in result and out is subj:
                        parts.setdefault(part, []).append(result[part])
    except (WorkerError, subprocess.TimeoutExpired) as exc:
        row.note = str(exc)[:300]
        return row
    finally:
        path.unlink(missing_ok=True)
    row.set_pairs(subj, anch)
    row.extra["frozen_parts_seconds"] = parts
    ratios = [f / a for f, a in zip(foreign, anch, strict=True)]
    row.extra["foreign_file"] = {"seconds": foreign, "ratio_median": statistics.median(ratios)}
    if "load_seconds" in parts:
        med = {k: statistics.median(v) * 1e3 for k, v in parts.items()}
        row.note += (
            f"; medians: load {med['load_seconds']:.0f} ms + first call "
            f"{med['call_seconds']:.0f} ms (importing nbcompile.frozen, "
            f"{med['import_seconds']:.0f} ms, not counted); a file from elsewhere (probed in "
            f"a child on its first load, lowered in a child before its first call): "
            f"{statistics.median(foreign) * 1e3:.0f} ms, ratio "
            f"{statistics.median(ratios):.2f}"
        )
    return row


def magic_rerun(
    model: str, pairs: int, targeted: bool = True, lowering_target: float | None = None
) -> list[Row]:
    """Unchanged ``%%compile`` cell re-runs, in three rows from the same interleaved cells.

    1. vs a plain cell calling the compiled function. The re-run does not call the model; the
       plain cell does. The +50 ms target is applied only where that call is negligible
       (``targeted``); elsewhere the row is informative.
    2. vs JAX's own trace and lowering of the same model (a plain cell: ``jax.jit(lambda:
       ...).trace(...).lower()``), what every re-run pays since the key is the lowered program
       (SPEC §9.2); ``lowering_target`` is the ratio it may reach (None: informative).
    3. vs the same JAX cell with the cyclic collector paused around it, as the re-run pauses
       it (informative: the re-run's cost beyond a JAX that pays no full collections).
    """
    row = Row(
        "%%compile re-run",
        model,
        "s",
        "unchanged %%compile cell",
        "plain cell calling it",
        target=Target("diff", "<=", 0.050, "+≤ 50 ms") if targeted else None,
        note=f"{pairs} interleaved triples in one IPython InteractiveShell (fresh process); "
        "the magic cell displays its Compilation, the plain cell calls the compiled "
        "function once and blocks",
    )
    lowering = Row(
        "%%compile re-run / trace+lower",
        model,
        "s",
        "unchanged %%compile cell",
        "JAX trace + lower, same model",
        target=ratio_at_most(lowering_target),
        note=f"{pairs} interleaved triples (same cells as the %%compile re-run row); the anchor "
        "cell traces and lowers the model through a fresh jax.jit, as the re-run must",
    )
    paused = Row(
        "%%compile re-run / trace+lower, gc paused",
        model,
        "s",
        "unchanged %%compile cell",
        "JAX trace + lower, collector paused",
        note=f"{pairs} interleaved cells (same as the %%compile re-run row); informative: the "
        "anchor cell pauses Python's cyclic collector around JAX's trace and lowering, as the "
        "re-run pauses it (nbcompile/_gc.py), so neither side pays the full collections a "
        "trace sets off",
    )
    try:
        result = run_worker("magic", model, str(pairs))
    except (WorkerError, subprocess.TimeoutExpired) as exc:
        row.note = lowering.note = paused.note = str(exc)[:300]
        return [row, lowering, paused]
    row.set_pairs(result["subject"], result["anchor"])
    lowering.set_pairs(result["subject"], result["trace_lower"])
    paused.set_pairs(result["subject"], result["trace_lower_paused"])
    if not targeted and row.diff is not None:
        row.note += (
            f"; informative: the plain cell runs the model once, the re-run does not "
            f"(difference {row.diff.median * 1e3:+.0f} ms)"
        )
    steps = {k: statistics.median(v) for k, v in result.get("steps", {}).items()}
    if steps:
        parts = ", ".join(
            f"{k} {v * 1e3:.0f}" for k, v in sorted(steps.items(), key=lambda kv: -kv[1])
        )
        lowering.note += f"; the re-run's own phases (medians, ms): {parts}"
    hits = result.get("cache_hits", [])
    for r in (row, lowering, paused):
        r.extra["first_run_seconds"] = result["first_run_seconds"]
        r.extra["xla_compiles_during_reruns"] = result["xla_compiles_during_reruns"]
        r.extra["cache_hits"] = f"{sum(hits)}/{len(hits)}"
        r.extra["rerun_steps_median_seconds"] = steps
        if result["xla_compiles_during_reruns"]:
            r.note += f"; WARNING: {result['xla_compiles_during_reruns']} XLA compiles in re-runs"
        if not all(hits):
            r.note += f"; WARNING: cache hits {sum(hits)}/{len(hits)}"
    return [row, lowering, paused]


def moved_code(model: str, pairs: int) -> Row:
    """The same program with its code moved vs compiling it again (informative): what reusing
    XLA's executable and re-reading the lines (nbcompile/stages/relocate.py) saves."""
    row = Row(
        "%%compile moved code",
        model,
        "s",
        "re-run, code moved (executable reused)",
        "same cell, -f (XLA compiles)",
        note=f"{pairs} interleaved pairs in one IPython InteractiveShell (fresh process); each "
        "pair's cell has one comment line more above the compiled function than the last",
    )
    try:
        result = run_worker("moved", model, str(pairs))
    except (WorkerError, subprocess.TimeoutExpired) as exc:
        row.note = str(exc)[:300]
        return row
    row.set_pairs(result["subject"], result["anchor"])
    reused = result["reused"]
    row.extra["executable_reused"] = f"{sum(reused)}/{len(reused)}"
    row.extra["xla_compiles_when_moved"] = sum(result["xla_compiles"])
    if not all(reused) or any(result["xla_compiles"]):
        row.note += (
            f"; WARNING: reused {sum(reused)}/{len(reused)}, XLA compiled {result['xla_compiles']}"
        )
    return row


def ensure_jaxviz() -> tuple[bool, str]:
    """Install the peer (pinned, no deps: it only needs jax) into ``benchmarks/out/.peer-venv``."""
    if (PEER_DIR / "jaxviz" / "__init__.py").exists():
        return True, "present"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--no-deps",
            "--target",
            str(PEER_DIR),
            JAXVIZ_PIN,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        return False, f"pip install {JAXVIZ_PIN} failed: " + proc.stderr.strip()[-200:]
    return True, "installed"


def jaxviz_sizes(models: list[str]) -> tuple[dict[str, Any] | None, str]:
    """jaxviz's HTML size per model, measured in a fresh process; (None, why) if unavailable."""
    try:
        ok, why = ensure_jaxviz()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"jaxviz not installable: {exc}"
    if not ok:
        return None, why
    env = {"PYTHONPATH": os.pathsep.join([str(PEER_DIR), str(ROOT)])}
    try:
        return run_worker("jaxviz", *models, env=env, timeout=900), why
    except (WorkerError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)[:300]
