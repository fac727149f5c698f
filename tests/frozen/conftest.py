"""Fixtures for the freeze tests: frozen reference files built once per session."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from nbcompile.frozen import freeze

HERE = Path(__file__).resolve().parent
# Records of checked programs (nbcompile/frozen/_checked.py) go to a folder of this run only,
# shared with the child processes the tests start.
os.environ["NBCOMPILE_CHECKED_DIR"] = tempfile.mkdtemp(prefix="nbc-checked-")

from . import _models  # noqa: E402


def run_python(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run the test interpreter in a fresh process (CPU only) from the repository root."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parents[1]), str(HERE)])
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        errors="replace",
        timeout=timeout,
        env=env,
        cwd=HERE.parents[1],
        check=False,
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The 10^5-file fuzz run only runs when asked for with ``-m fuzz_full``."""
    if "fuzz_full" in (config.getoption("markexpr") or ""):
        return
    full = [item for item in items if item.get_closest_marker("fuzz_full")]
    if full:
        config.hook.pytest_deselected(items=full)
        items[:] = [item for item in items if not item.get_closest_marker("fuzz_full")]


@pytest.fixture(scope="session")
def frozen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("frozen")


@pytest.fixture(scope="session")
def mlp_file(frozen_dir: Path) -> Path:
    fn, params, x = _models.make("mlp")
    path = frozen_dir / "mlp.nbc"
    freeze(fn, params, x, path=path, measure_compiled=False)
    return path


@pytest.fixture(scope="session")
def tpu_only_file(frozen_dir: Path) -> Path:
    """A valid file lowered for TPU only: refused with NBC503 on a machine without a TPU."""
    import numpy as np

    path = frozen_dir / "tpu_only.nbc"
    freeze(
        lambda p, x: x @ p,
        np.ones((3, 3), np.float32),
        np.ones((2, 3), np.float32),
        path=path,
        platforms=("tpu",),
        measure_compiled=False,
    )
    return path
