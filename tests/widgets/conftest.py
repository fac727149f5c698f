"""Report fixtures for the view tests (loaded under a unique module name: no package here)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest


def load_report_fixtures() -> ModuleType:
    name = "nbcompile_view_fixtures"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("fixtures.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def report_fixtures() -> ModuleType:
    return load_report_fixtures()


@pytest.fixture(scope="session")
def small_report(report_fixtures: ModuleType) -> dict[str, Any]:
    return report_fixtures.small_report()


@pytest.fixture(scope="session")
def big_report(report_fixtures: ModuleType) -> dict[str, Any]:
    return report_fixtures.big_report()
