"""Smoke test of the benchmark harness: ``python -m benchmarks --quick`` on toy sizes.

Checks the structure of the printed table and of the JSON (machine, versions, one row per planned
measurement, pairwise ratios, statuses consistent with the targets) and the ``--check`` rule —
never the measured times themselves.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.__main__ import FIGURES, QUICK, main
from benchmarks._process_rows import process_model
from benchmarks._stats import Row, summarise
from benchmarks._table import compare
from nbcompile.processes import collectives_hang

ROOT = Path(__file__).resolve().parent.parent


def _planned() -> list[tuple[str, str, int | None]]:
    """(figure, model, repeats) the quick plan must produce, in table order."""
    out: list[tuple[str, str, int | None]] = []
    out += [("call overhead", m, p) for m, p, _ in QUICK.overhead]
    out += [("compile total", m, p) for m, p, _ in QUICK.compile]
    out += [("eager / compiled", m, p) for m, p, _, _ in QUICK.eager]
    out += [("displayed bytes", m, 1) for m in QUICK.size]
    out += [("first paint", m, QUICK.paint_repeats) for m in QUICK.paint]
    out += [("frozen load+1st call", m, p) for m, p in QUICK.frozen]
    out += [("%%compile re-run", m, p) for m, p, _, _ in QUICK.magic]
    out += [("%%compile re-run / trace+lower", m, p) for m, p, _, _ in QUICK.magic]
    out += [("%%compile re-run / trace+lower, gc paused", m, p) for m, p, _, _ in QUICK.magic]
    out += [("--profile overhead", m, p) for m, p, _ in QUICK.profile]
    out += [("calibration", "CPU peaks", QUICK.calibration)] if QUICK.calibration else []
    cells, pairs = QUICK.growth
    out += [("RSS growth / recompile", f"{cells} cells, new shape each", pairs)] if cells else []
    for model, pairs, _, _ in QUICK.scale:
        out += [
            ("compile+analysis", model, pairs),
            ("usable function", model, pairs),
            ("compile+analysis CPU", model, pairs),
            ("usable function CPU", model, pairs),
            ("displayed bytes", model, 1),
        ]
    out += [("first paint", model, QUICK.paint_repeats) for model, *_ in QUICK.scale]
    out += [("--memory overhead", m, p) for m, p, _ in QUICK.memory]
    # layout: not in the quick plan (QUICK.layout is empty)
    for model, pairs, _ in QUICK.capture:
        out += [("call capture", model, pairs), ("call capture CPU", model, pairs)]
        # the same pairs with the collector on, informative (benchmarks/_capture_rows.py)
        out += [("call capture, collector on", model, max(3, pairs // 2))]
    for model, pairs, _, reps, _, _ in QUICK.passes:
        out += [
            ("--passes overhead", model, pairs),
            ("kernel code", model, reps),
            ("Passes tab paint", model, QUICK.paint_repeats),
        ]
    pairs, rounds, layers, width, batch = QUICK.processes
    if pairs:
        out += [
            ("%%compile 2 processes", process_model(layers, width, batch), pairs),
            ("%%compile 2 processes CPU", process_model(layers, width, batch), pairs),
            ("fingerprint exchange", "2 processes", rounds),
        ]
    for n, pairs, _, _ in QUICK.calls:
        model = f"{n:,} calls of one function"
        out += [("many calls", model, pairs), ("many calls peak RSS", model, pairs)]
    return out


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "quick.json"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--no-peer", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=480,  # two clusters of engines start in it (the processes figure)
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, json.loads(out.read_text())


def test_json_records_machine_versions_and_every_planned_row(quick_run):
    _, data = quick_run
    assert data["schema"] == "nbcompile.bench/1"
    assert data["quick"] is True and data["figures"] == list(FIGURES)
    assert data["machine"]["cpu"] and data["machine"]["cores"] >= 1
    assert len(data["machine"]["load_average_start"]) == 3
    for name in ("python", "jax", "jaxlib", "nbcompile"):
        assert data["versions"][name]
    got = [(r["figure"], r["model"]) for r in data["rows"]]
    assert got == [(f, m) for f, m, _ in _planned()]


def test_rows_hold_pairwise_ratios_and_consistent_statuses(quick_run):
    _, data = quick_run
    planned = {(f, m): n for f, m, n in _planned()}
    for raw in data["rows"]:
        row = Row.from_json(raw)
        assert raw["status"] == row.status in {"pass", "fail", "na", "info"}
        if row.subject is None:
            assert row.status in {"na", "fail"} and row.note  # unmeasured rows say why
            continue
        assert row.subject.n == planned[(row.figure, row.model)]
        assert row.subject.min <= row.subject.median <= row.subject.max
        if row.anchor is not None and row.ratio is not None:
            pairs = [s / a for s, a in zip(row.subject.values, row.anchor.values, strict=True)]
            assert sorted(row.ratio.values) == pytest.approx(sorted(pairs))
        if row.target is not None and row.status in {"pass", "fail"}:
            got = row.metric(row.target.on)
            ok = got <= row.target.value if row.target.op == "<=" else got >= row.target.value
            assert row.status == ("pass" if ok else "fail")


def test_measurements_did_what_they_claim(quick_run):
    _, data = quick_run
    rows = {(r["figure"], r["model"]): r for r in data["rows"]}
    compile_row = rows[("compile total", QUICK.compile[0][0])]
    # fresh models each repetition: both sides really compiled, nothing served from a cache
    assert all(n > 0 for side in compile_row["extra"]["xla_compiles"].values() for n in side)
    magic_row = rows[("%%compile re-run", QUICK.magic[0][0])]
    assert magic_row["subject"] is not None, magic_row["note"]
    assert magic_row["extra"]["xla_compiles_during_reruns"] == 0
    hits, runs = map(int, magic_row["extra"]["cache_hits"].split("/"))
    assert runs == QUICK.magic[0][1] and hits == runs, magic_row["extra"]["cache_hits"]
    lowering_row = rows[("%%compile re-run / trace+lower", QUICK.magic[0][0])]
    assert lowering_row["anchor"] is not None, lowering_row["note"]
    # every re-run traced and lowered (SPEC §9.2), and says so in its timings
    assert {"trace", "lower"} <= set(lowering_row["extra"]["rerun_steps_median_seconds"])
    paused_row = rows[("%%compile re-run / trace+lower, gc paused", QUICK.magic[0][0])]
    assert paused_row["anchor"]["n"] == QUICK.magic[0][1], paused_row["note"]
    size_row = rows[("displayed bytes", QUICK.size[0])]
    assert size_row["subject"]["median"] == sum(size_row["extra"]["parts"].values())
    assert "text/plain" in size_row["extra"]["parts"]
    assert size_row["anchor"] is None and "--no-peer" in size_row["note"]
    capture = rows[("call capture", QUICK.capture[0][0])]
    assert capture["extra"]["calls_recorded"] > 0 and capture["extra"]["capture_complete"]
    passes = rows[("--passes overhead", QUICK.passes[0][0])]
    assert all(n > 0 for n in passes["extra"]["pass_steps"])  # the dump held XLA's passes
    code = rows[("kernel code", QUICK.passes[0][0])]
    assert code["subject"] is not None and code["extra"]["kernels"], code["note"]
    two = rows[("%%compile 2 processes", process_model(*QUICK.processes[2:]))]
    hangs = collectives_hang()
    if hangs is not None:  # jaxlib 0.12.1: nbcompile.cluster refuses it, the row says why
        assert two["ratio"] is None and "NBC803" in two["note"] and hangs in two["note"]
        return
    assert two["ratio"] is not None, two["note"]
    assert two["extra"]["processes_seen"] == [2]  # the subject's cells ran on 2 JAX processes
    assert all(r["processes"] == 0 for p in two["extra"]["runs"] for r in p["one"])


def test_table_has_one_line_per_row_and_the_columns(quick_run):
    stdout, data = quick_run
    lines = stdout.splitlines()
    header = next(i for i, ln in enumerate(lines) if ln.startswith("figure"))
    for col in ("model", "subject", "anchor", "ratio [spread]", "target", "status"):
        assert col in lines[header]
    body = lines[header + 2 : header + 2 + len(data["rows"])]
    for line, row in zip(body, data["rows"], strict=True):
        assert line.startswith(row["figure"]) and row["model"] in line
        assert line.rstrip().endswith(row["status"])


def test_check_flags_only_regressions_beyond_the_margin(quick_run):
    _, data = quick_run
    rows = [Row.from_json(r) for r in data["rows"]]
    checked = [r for r in rows if r.better != "none" and (r.ratio or r.subject)]
    assert checked
    assert not any(f.regressed for f in compare(rows, rows))
    worse = []
    for r in rows:
        new = Row.from_json(r.to_json())
        s = new.ratio or new.subject
        if s is not None:
            factor = 10.0 if new.better == "lower" else 0.1
            scaled = summarise([v * factor for v in s.values])
            if new.ratio is not None:
                new.ratio = scaled
            else:
                new.subject = scaled
        worse.append(new)
    findings = compare(rows, worse)
    assert {f.key for f in findings if f.regressed} == {r.key for r in checked}
    assert all(not math.isnan(f.margin) and f.margin >= 0.15 for f in findings)


def test_cli_refuses_unknown_figures_and_a_missing_baseline(tmp_path, capsys):
    assert main(["--only", "nonsense"]) == 2
    assert main(["--check", "--baseline", str(tmp_path / "none.json")]) == 2
    assert "no baseline" in capsys.readouterr().err
