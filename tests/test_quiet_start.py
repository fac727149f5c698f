"""With the [tpu] extra (libtpu) installed and no TPU, a notebook's first JAX cell must not
print libtpu's start-up noise once nbcompile is loaded (issue: "unexpected worker hostname",
"Source Location Trace" in the first cell of every notebook)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

NOTEBOOK = """
from IPython.testing.globalipapp import start_ipython
ip = start_ipython()
{load}
res = ip.run_cell("import jax, jax.numpy as jnp\\nprint('sum', float(jnp.ones(3).sum()))")
assert res.success, res.error_in_exec
"""


def _first_cell(load: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    code = NOTEBOOK.format(load="ip.run_line_magic('load_ext', 'nbcompile')" if load else "")
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=False,
    )


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="needs the [tpu] extra")
@pytest.mark.skipif(
    os.path.isdir("/dev/vfio") or any(Path("/dev").glob("accel*")),
    reason="a real TPU is here: its messages matter",
)
def test_load_ext_keeps_libtpu_noise_out_of_the_first_cell():
    control = _first_cell(load=False)
    assert control.returncode == 0, control.stderr[-2000:]
    if "TPU" not in control.stderr:
        pytest.skip("this libtpu prints nothing at start-up: nothing to hide")
    quiet = _first_cell(load=True)
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert "sum 3.0" in quiet.stdout
    assert "TPU" not in quiet.stderr and "Source Location Trace" not in quiet.stderr, quiet.stderr
