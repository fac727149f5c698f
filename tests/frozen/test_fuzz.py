"""Mutation fuzzing of the loader: only FreezeError may escape, no crash, no hang.

Default run: 3,000 mutated files (under a minute). Full run (>= 10^5 files):

    JAX_PLATFORMS=cpu .venv/bin/pytest tests/frozen/test_fuzz.py -m fuzz_full -q
"""

from __future__ import annotations

import json
from pathlib import Path

import _models
import numpy as np
import pytest
from conftest import run_python

from nbcompile.frozen import freeze

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden_v1.nbc"


@pytest.fixture(scope="module")
def bases(frozen_dir: Path, mlp_file: Path) -> list[str]:
    fn, params, x = _models.make("attention")
    attention = frozen_dir / "fuzz_attention_constants.nbc"
    freeze(fn, params, x, path=attention, constants=True, measure_compiled=False)
    multi = frozen_dir / "fuzz_multi.nbc"
    freeze(
        lambda p, a, b: {"s": a @ p["w"], "t": [b * 2]},
        {"w": np.ones((3, 5), np.float32)},
        np.ones((2, 3), np.float32),
        np.arange(4, dtype=np.int32),
        weights_argnums=0,
        path=multi,
        measure_compiled=False,
    )
    return [str(mlp_file), str(GOLDEN), str(attention), str(multi)]


def _fuzz(bases: list[str], tmp_path: Path, count: int, seed: int, timeout: float) -> dict:
    result = tmp_path / "fuzz.json"
    proc = run_python(
        "tests/frozen/_fuzz_worker.py", str(result), str(count), str(seed), *bases, timeout=timeout
    )
    progress = (
        (tmp_path / "fuzz.json.progress").read_text()
        if result.with_suffix(".json.progress").exists()
        else ""
    )
    assert proc.returncode == 0, (
        f"worker died (rc {proc.returncode}) near iteration/seed {progress}"
    )
    report = json.loads(result.read_text())
    assert report["failures"] == [], report["failures"][:3]
    outcomes = [sum(by.values()) for by in report["stats"].values()]
    assert sum(outcomes) == count
    return report


def test_fuzz_loader(bases: list[str], tmp_path: Path) -> None:
    report = _fuzz(bases, tmp_path, count=3000, seed=20261130, timeout=300)
    stats = report["stats"]
    # Every kind of mutation ran, and the structure-aware ones got past the digests into
    # the deeper checks (otherwise the fuzz would only exercise SHA-256).
    assert set(stats) == {
        "file-bytes",
        "manifest-json",
        "manifest-bytes",
        "weights-header",
        "weights-bytes",
        "program-bytes",
    }
    assert stats["file-bytes"].get("NBC501", 0) > 0
    deep = {code for by in stats.values() for code in by}
    assert {"NBC500", "NBC501", "NBC504", "loaded"} <= deep, deep
    print(f"fuzz: {report['count']} files in {report['seconds']:.1f} s; {json.dumps(stats)}")


@pytest.mark.fuzz_full
def test_fuzz_loader_full(bases: list[str], tmp_path: Path) -> None:
    report = _fuzz(bases, tmp_path, count=100_000, seed=1, timeout=4 * 3600)
    assert report["count"] == 100_000
