"""scripts/gpu_check.py (``make gpu-check``) runs harmlessly without a GPU, and its parts work."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent.parent
SCRIPT = ROOT / "scripts" / "gpu_check.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_check_without_a_gpu_says_so_and_exits_0():
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "no GPU" in proc.stdout


def test_gpu_check_models_compile_run_and_tabulate_here():
    gpu_check = _load()
    rows = gpu_check.check_models(None, scale=8, repeats=2)
    assert [r["model"] for r in rows] == ["mlp", "attention"]
    assert all(r["kernels"] >= 1 and r["run_ms"] > 0 and r["compile_s"] > 0 for r in rows)
    table = gpu_check.markdown_table(rows).splitlines()
    assert table[0].startswith("| model | backend | kernels")
    assert len(table) == 2 + len(rows)
    assert table[2].startswith(f"| mlp | cpu | {rows[0]['kernels']} |")


def test_gpu_check_matches_device_kinds_to_targets():
    gpu_check = _load()
    assert gpu_check.matching_target("NVIDIA H200") == "h200"
    assert gpu_check.matching_target("NVIDIA H100 80GB HBM3") == "h100"
    assert gpu_check.matching_target("Tesla V100-SXM2-16GB") == "v100"
    assert gpu_check.matching_target("NVIDIA GeForce RTX 4090") is None
    from nbcompile.targets import gpu_target_config

    fields = gpu_check.config_fields(gpu_target_config("h200"))
    assert fields["core_count"] == "132" and fields["major"] == "9"
