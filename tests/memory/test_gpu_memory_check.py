"""scripts/_gpu_memory.py (part of ``make gpu-check``): maps each model; measures only where the
device reports ``memory_stats()`` (not on the CPU), and says so."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_memory_rows_map_every_model_and_say_what_was_not_measured():
    sys.path.insert(0, str(ROOT))
    gpu_check = _load("gpu_check", ROOT / "scripts" / "gpu_check.py")
    part = _load("gpu_memory", ROOT / "scripts" / "_gpu_memory.py")
    rows = part.memory_rows(gpu_check.models(scale=8))
    assert [r["model"] for r in rows] == ["mlp", "attention"]
    for r in rows:
        # the live peak is memory XLA holds: at most its allocation (+ constants, a few bytes)
        assert 0 < r["peak_bytes"] <= r["allocated_bytes"] + 64
        assert r["measured_bytes"] is None and "no memory_stats()" in r["note"]
    table = part.memory_table(rows).splitlines()
    assert table[0].startswith("| model | map peak (live) | XLA allocation")
    assert len(table) == 2 + len(rows)
