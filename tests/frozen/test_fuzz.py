"""Mutation fuzzing of the loader: each mutated file is loaded, called and differentiated in a
supervised child; only FreezeError may escape, and no death by signal, hang or memory blow-up.

Default run: 1,500 mutated files. Full run (>= 10^5 files, `make test-fuzz`):

    JAX_PLATFORMS=cpu .venv/bin/pytest tests/frozen/test_fuzz.py -m fuzz_full -q
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nbcompile.frozen import freeze

from . import _models, _supervise

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden_v1.nbc"
STEPS = ("load", "call", "grad")
#: per file: a child past these is killed and the file counted as a failure (hang / memory)
ITEM_SECONDS = 30.0
MEMORY_LIMIT = 3 * 2**30


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


def _fuzz(bases: list[str], count: int, seed: int) -> dict[str, dict[str, int]]:
    ids = [str(i) for i in range(count)]
    outcomes = _supervise.run(
        "_fuzz_worker.py",
        ids,
        [str(count), str(seed), *bases],
        item_seconds=ITEM_SECONDS,
        memory_bytes=MEMORY_LIMIT,
    )
    assert set(outcomes) == set(ids), f"{count - len(outcomes)} files without an answer"
    failures = {
        i: got
        for i, got in outcomes.items()
        if "load" not in got or any(str(got.get(s, "")).startswith("ESCAPED") for s in STEPS)
    }
    assert not failures, json.dumps(dict(list(failures.items())[:5]), indent=1)
    stats: dict[str, dict[str, int]] = {}
    for got in outcomes.values():
        for step in STEPS:
            if step in got:
                key = f"{step}:{got[step]}"
                stats.setdefault(got["kind"], {}).setdefault(key, 0)
                stats[got["kind"]][key] += 1
    return stats


def test_fuzz_loader(bases: list[str]) -> None:
    stats = _fuzz(bases, count=1500, seed=20261130)
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
    assert stats["file-bytes"].get("load:NBC501", 0) > 0
    deep = {key for by in stats.values() for key in by}
    assert {"load:NBC500", "load:NBC501", "load:NBC504", "load:loaded"} <= deep, deep
    # Loaded files were called and differentiated (the criterion includes both).
    assert {"call:ran", "grad:NBC507"} <= deep, deep
    print(f"fuzz: {json.dumps(stats)}")


@pytest.mark.fuzz_full
def test_fuzz_loader_full(bases: list[str]) -> None:
    stats = _fuzz(bases, count=100_000, seed=1)
    assert (
        sum(n for by in stats.values() for k, n in by.items() if k.startswith("load:")) == 100_000
    )
