"""Issue 28 item 11: with the [tpu] extra (libtpu) installed and no TPU, a script using the
Python API (``import nbcompile`` + ``nbcompile.compile``) and a fresh process that only loads a
frozen model must not print libtpu's start-up errors (``=== Source Location Trace ===``,
``E0000 ... TPU_WORKER_HOSTNAMES``): the package starts JAX quietly, as ``%load_ext`` does
(tests/test_quiet_start.py). Each case runs in a fresh child process without JAX_PLATFORMS."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

NOISE = ("Source Location Trace", "TPU_WORKER_HOSTNAMES", "E0000")

SCRIPT = """
import jax
import jax.numpy as jnp
{imports}

def mlp(w, x):
    return jnp.tanh(x @ w).sum(axis=-1)

w = jnp.ones((4, 3)) * 0.1
x = jnp.arange(8.0).reshape(2, 4)
{use}
"""

COMPILE = """
c = nbcompile.compile(mlp, w, x)
print("out", float(c.fn(w, x).sum()))
"""

FREEZE = """
nbcompile.freeze(mlp, w, x, path={path!r}, platforms=("cpu",))
"""

LOAD = """
import numpy as np
import nbcompile
model = nbcompile.load({path!r})
print("out", float(np.asarray(model(np.arange(8.0, dtype=np.float32).reshape(2, 4))).sum()))
"""

needs_libtpu = pytest.mark.skipif(
    importlib.util.find_spec("libtpu") is None, reason="needs the [tpu] extra"
)
no_tpu_here = pytest.mark.skipif(
    os.path.isdir("/dev/vfio") or any(Path("/dev").glob("accel*")),
    reason="a real TPU is here: its messages matter",
)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


def _noisy(stderr: str) -> list[str]:
    return [n for n in NOISE if n in stderr]


def _skip_unless_libtpu_speaks() -> None:
    control = _run(SCRIPT.format(imports="", use="print('out', float(mlp(w, x).sum()))"))
    if not _noisy(control.stderr):
        pytest.skip("this libtpu prints nothing at start-up: nothing to hide")


@needs_libtpu
@no_tpu_here
def test_python_api_in_a_script_starts_jax_quietly():
    _skip_unless_libtpu_speaks()
    quiet = _run(SCRIPT.format(imports="import nbcompile", use=COMPILE))
    assert "out " in quiet.stdout
    assert not _noisy(quiet.stderr), quiet.stderr


@needs_libtpu
@no_tpu_here
def test_load_in_a_fresh_process_starts_jax_quietly(tmp_path):
    _skip_unless_libtpu_speaks()
    path = str(tmp_path / "mlp.nbc")
    _run(SCRIPT.format(imports="import nbcompile", use=FREEZE.format(path=path)))
    quiet = _run(LOAD.format(path=path))
    assert "out " in quiet.stdout
    assert not _noisy(quiet.stderr), quiet.stderr


@needs_libtpu
@no_tpu_here
def test_a_platform_the_user_chose_is_kept():
    """``jax_platforms`` set by the user before importing nbcompile is left as it is."""
    code = (
        "import jax\njax.config.update('jax_platforms', 'cpu,tpu')\nimport nbcompile\n"
        "print('platforms', jax.config.jax_platforms)"
    )
    assert "platforms cpu,tpu" in _run(code).stdout
