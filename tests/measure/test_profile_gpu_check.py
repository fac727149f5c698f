"""The ``--profile`` part of ``make gpu-check`` (scripts/_gpu_profile.py) runs and tabulates here
on the CPU; on a GPU the same code reads the device plane (gpu_check warns if it does not)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_check_profiles_its_models_and_tabulates_where_the_events_came_from():
    gpu_profile = _load("_gpu_profile")
    models = _load("gpu_check").models(scale=8)
    rows = gpu_profile.profile_models(models, calls=3)
    assert [r["model"] for r in rows] == ["mlp", "attention"]
    for r in rows:
        assert r["backend"] == "cpu" and r["where"] == "host threads" and not r["device_plane"]
        assert r["kernels"] >= 1 and 0 < r["coverage"] <= 1 and r["step_ms"] > 0
        if r["peaks"] is None:  # a kernel beat the peaks measured on this busy machine
            assert any(n.startswith("refused: ") for n in r["notes"]), r["notes"]
        else:
            assert r["peaks"]["flops_per_s"]["source"] == "measured"
    table = gpu_profile.profile_table(rows).splitlines()
    assert table[0].startswith("| model | backend | kernel events from")
    assert len(table) == 2 + len(rows) and table[2].startswith("| mlp | cpu | host threads |")
