"""Helpers shared by the browser tests (a plain module: conftest files are not importable by name)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "build" / "ui-artifacts"


def kernel_env(tmp: Path | None = None) -> dict[str, str]:
    """Environment for Jupyter kernels: nbcompile importable from this checkout, CPU only."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env["JAX_PLATFORMS"] = "cpu"
    if tmp is not None:
        env["IPYTHONDIR"] = str(tmp / "ipython")
    return env


def screenshot(page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path))
    return path


def report_fixtures() -> ModuleType:
    """tests/widgets/fixtures.py, loaded under a unique module name."""
    name = "nbcompile_view_fixtures"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, REPO / "tests" / "widgets" / "fixtures.py"
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
