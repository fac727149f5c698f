"""``%load_ext nbcompile`` on a machine whose only device is its CPU, with the ``[tpu]`` extra
installed (and the CUDA plugin, under ``make test-tutorials-plugins``): JAX starts on the CPU
without printing libtpu's or the plugin's start-up noise, libtpu stays unloaded (JAX's profiler
crashes a process that loaded it), and a deviceless compile for a TPU still works."""

from __future__ import annotations

import glob
import importlib.util
import os
import subprocess
import sys

import pytest

CHILD = r"""
import sys
from nbcompile._compat import quiet_backend_start
quiet_backend_start()
import jax, tempfile
print("backend", jax.default_backend())
print("libtpu loaded", any("libtpu" in line for line in open("/proc/self/maps")))
f = jax.jit(lambda x: x * 2.0)
x = jax.numpy.ones(4)
with jax.profiler.trace(tempfile.mkdtemp()):
    f(x).block_until_ready()
print("profiled")
import nbcompile
c = nbcompile.compile(lambda a: jax.numpy.tanh(a) * 2.0, jax.numpy.ones((8, 128)), backend="tpu",
                      topology="v5e:2x2")
print("tpu", c.backend, "T(8,128)" in c.hlo)
import importlib.util
if importlib.util.find_spec("jax_cuda12_plugin"):  # make test-tutorials-plugins
    g = nbcompile.compile(lambda a: jax.numpy.tanh(a @ a.T), jax.numpy.ones((64, 64)),
                          backend="gpu", gpu="h100")
    print("gpu", g.backend, g.hlo is not None)
"""

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="needs the [tpu] extra"),
    pytest.mark.skipif(
        sys.platform != "linux" or bool(glob.glob("/dev/accel*")) or os.path.isdir("/dev/vfio"),
        reason="a machine without a TPU",
    ),
]


def test_jax_starts_on_the_cpu_quietly_and_can_profile():
    env = {
        k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "TF_CPP_MIN_LOG_LEVEL")
    }
    run = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300
    )
    out = run.stdout.splitlines()
    assert run.returncode == 0, run.stdout + run.stderr[-2000:]
    assert out[:3] == ["backend cpu", "libtpu loaded False", "profiled"], out
    assert out[3] == "tpu tpu True"
    if importlib.util.find_spec("jax_cuda12_plugin"):  # the plugin registered, deviceless works
        assert out[4] == "gpu cuda True", out
    for noise in ("TPU_ACCELERATOR_TYPE", "Source Location Trace", "Jax plugin configuration"):
        assert noise not in run.stderr, run.stderr[:2000]
