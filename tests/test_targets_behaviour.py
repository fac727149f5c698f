"""One behaviour on every target: CPU, an 8-device CPU mesh, deviceless TPU, StableHLO only.

The checks live in tests/_behaviour.py; the mesh runs them in a child process because
``--xla_force_host_platform_device_count`` must be set before JAX starts.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from . import helpers as _behaviour

HERE = Path(__file__).resolve().parent
COUNTER = _behaviour.XlaCompiles()
HAS_LIBTPU = importlib.util.find_spec("libtpu") is not None

TARGETS = {
    "cpu": ("", {}, True, True),
    "tpu": (
        "--backend tpu --topology v5e:2x2",
        {"backend": "tpu", "topology": "v5e:2x2"},
        False,
        True,
    ),
    "stablehlo-only": ("--backend tpu", {"backend": "tpu"}, False, False),
}


@pytest.fixture
def ip(shell):
    shell.reset(new_session=False)
    return shell


@pytest.mark.parametrize("name", list(TARGETS))
def test_same_behaviour_on_every_target(ip, name, monkeypatch):
    opts, api, runnable, compiles = TARGETS[name]
    if name == "tpu" and not HAS_LIBTPU:
        pytest.skip('libtpu is not installed (pip install "nbcompile[tpu]")')
    if name == "stablehlo-only":
        from nbcompile.targets import _resolve

        monkeypatch.setattr(_resolve, "_libtpu_available", lambda: False)
    done = _behaviour.run_all(ip, opts, api, runnable=runnable, compiles=compiles, counter=COUNTER)
    assert done == ["grad", "error", "print", "kwargs", "compiler_options", "cache"]


@pytest.mark.slow
def test_same_behaviour_on_an_8_device_cpu_mesh():
    path = os.pathsep.join([str(HERE), *sys.path])
    result = _behaviour.child_json(
        [str(HERE / "behaviour_child.py")],
        env={**_behaviour.EIGHT_CPU_DEVICES, "PYTHONPATH": path},
        timeout=600,
    )
    assert result["devices"] == 8
    assert result["done"] == ["grad", "error", "print", "kwargs", "compiler_options", "cache"]
    assert result["mesh"] == {"data": 8}
