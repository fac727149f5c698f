"""TPU targets: deviceless compiles through libtpu, and StableHLO-only without it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import nbcompile
from nbcompile.targets import _resolve as resolve_module
from nbcompile.targets import compare, resolve_target

from .helpers import MLP_SHARDING, mlp, mlp_args

needs_libtpu = pytest.mark.skipif(
    importlib.util.find_spec("libtpu") is None,
    reason='libtpu is not installed (pip install "nbcompile[tpu]")',
)
ROOT = Path(__file__).parent.parent.parent


@pytest.fixture(scope="module")
def tpu_mlp():
    if importlib.util.find_spec("libtpu") is None:
        pytest.skip('libtpu is not installed (pip install "nbcompile[tpu]")')
    return nbcompile.compile(mlp, *mlp_args(), backend="tpu", topology="v5e:2x2")


@needs_libtpu
def test_v5e_deviceless_compile_gives_tpu_hlo_cost_and_memory(tpu_mlp):
    t = tpu_mlp.target
    assert (t.platform, t.present, t.deviceless, t.lower_only) == ("tpu", False, True, False)
    assert len(t.devices) == 4 and {d.platform for d in t.devices} == {"tpu"}
    assert "v5e:2x2" in t.note and "\n" not in t.note
    assert tpu_mlp.compiled is not None
    assert "T(8,128)" in tpu_mlp.hlo  # TPU tiled layouts
    assert tpu_mlp.cost["optimal_seconds"] > 0
    assert tpu_mlp.cost["flops"] >= 2 * 16 * 64 * 128  # at least the first matmul
    assert tpu_mlp.memory["generated_code_bytes"] > 0
    assert tpu_mlp.memory["argument_bytes"] >= sum(
        a.size * a.dtype.itemsize for a in jax.tree.leaves(mlp_args())
    )
    assert {"trace", "lower", "compile"} <= set(tpu_mlp.timings)
    assert not tpu_mlp.runnable and tpu_mlp.target.note in tpu_mlp.notes


@needs_libtpu
def test_compare_cpu_and_tpu_gives_kernel_counts_for_both(tpu_mlp):
    cpu = nbcompile.compile(mlp, *mlp_args(), backend="cpu")
    result = compare(
        [
            ("CPU", cpu.hlo, cpu.cost, cpu.memory),
            ("TPU v5e", tpu_mlp.hlo, tpu_mlp.cost, tpu_mlp.memory),
            ("GPU h100 (lowered only)", None, None, None),
        ]
    )
    rows = {r["label"]: r for r in result["rows"]}
    assert rows["CPU"]["kernels"] >= 1 and rows["TPU v5e"]["kernels"] >= 1
    assert rows["GPU h100 (lowered only)"]["kernels"] is None
    assert rows["TPU v5e"]["optimal_seconds"] == tpu_mlp.cost["optimal_seconds"]
    assert "optimal_seconds" not in rows["CPU"]  # XLA:CPU estimates no time
    text = result.text()
    assert f"CPU makes {rows['CPU']['kernels']} kernel" in text
    assert f"TPU v5e makes {rows['TPU v5e']['kernels']} kernel" in text
    # TPU lowers the matmul to a convolution op; the CPU keeps a dot
    assert "convolution" in rows["TPU v5e"]["ops"]
    assert "convolution" in result["only_in"]["TPU v5e"]


@needs_libtpu
@pytest.mark.parametrize(
    ("topology", "mesh", "crosses"), [("v5e:2x2", "4", False), ("v5e:4x4", "16", True)]
)
def test_tpu_mesh_collectives_cross_hosts_only_on_multi_host_topologies(topology, mesh, crosses):
    c = nbcompile.compile(
        mlp,
        *mlp_args(),
        backend="tpu",
        topology=topology,
        mesh=mesh,
        shard={"params.w2": "data,None"},
    )
    assert c.target.hosts == (1 if not crosses else 4)
    found = [k for k in c.collectives if k["op"] in ("all-reduce", "reduce-scatter")]
    assert found, c.hlo[-2000:]
    assert all(k["crosses_hosts"] is crosses for k in found)
    assert all(k["bytes"] > 0 for k in found)


@needs_libtpu
def test_tpu_mesh_compile_of_the_sharded_mlp():
    c = nbcompile.compile(
        mlp, *mlp_args(), backend="tpu", topology="v5e:2x4", mesh="4x2", shard=MLP_SHARDING
    )
    shapes = c.placement.per_device_shapes
    assert shapes["x"] == ((16, 64), (4, 64))
    assert shapes["params.w1"] == ((64, 128), (64, 64))
    assert any(k["op"] == "all-reduce" for k in c.collectives)


@needs_libtpu
def test_libtpu_noise_is_kept_off_stderr():
    code = (
        "import jax.numpy as jnp\n"
        "import nbcompile\n"
        "c = nbcompile.compile(lambda x: jnp.sin(x) * 2, jnp.ones((8, 128)), backend='tpu', "
        "topology='v5e:2x2')\n"
        "assert c.compiled is not None and c.fusions is not None\n"
        "print('ok')\n"
    )
    raw = (
        "from jax.experimental import topologies\ntopologies.get_topology_desc('v5e:2x2', 'tpu')\n"
    )
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    ours, control = (
        subprocess.run(
            [sys.executable, "-c", src],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        for src in (code, raw)
    )
    assert ours.returncode == 0 and ours.stdout.strip() == "ok", ours.stderr[-2000:]
    if "TPU" not in control.stderr:
        pytest.skip("this libtpu prints nothing on stderr: nothing to hide")
    assert "TPU" not in ours.stderr, ours.stderr[-2000:]


def _platform_program(x):
    return jax.lax.platform_dependent(x, cpu=lambda v: v * 2.0, tpu=lambda v: v * 3.0)


def test_without_libtpu_tpu_is_lowered_only_with_a_one_line_note(monkeypatch):
    monkeypatch.setattr(resolve_module, "_libtpu_available", lambda: False)
    t = resolve_target("tpu")
    assert (t.present, t.deviceless, t.lower_only) == (False, False, True)
    assert 'pip install "nbcompile[tpu]"' in t.note and "\n" not in t.note
    c = nbcompile.compile(_platform_program, jnp.ones((4,), jnp.float32), backend="tpu")
    assert c.compiled is None and c.hlo is None and not c.runnable
    assert "stablehlo." in c.stablehlo
    # lowered for TPU, not for the CPU it runs on: only the tpu branch is in the module
    assert "3.000000e+00" in c.stablehlo and "2.000000e+00" not in c.stablehlo
    assert c.notes[0] == t.note
    cpu = nbcompile.compile(_platform_program, jnp.ones((4,), jnp.float32))
    assert "2.000000e+00" in cpu.stablehlo


def test_without_cuda_plugin_gpu_is_lowered_only(monkeypatch):
    monkeypatch.setattr(resolve_module, "_cuda_plugin_available", lambda: False)
    t = resolve_target("gpu", gpu="h200")
    assert t.lower_only and t.platform == "cuda" and t.gpu == "h200"
    assert f'pip install "jax[cuda12]=={jax.__version__}"' in t.note and "\n" not in t.note
    c = nbcompile.compile(mlp, *mlp_args(), backend="gpu", gpu="h200")
    assert c.compiled is None and "stablehlo.dot_general" in c.stablehlo


@needs_libtpu
def test_analyse_finds_tpu_fusions_with_source_lines(tpu_mlp):
    import inspect

    result = tpu_mlp.analysis
    body, first = inspect.getsourcelines(mlp)
    body_lines = set(range(first + 1, first + len(body)))
    assert result.fusions
    assert all(set(f.source_lines) <= body_lines for f in result.fusions)
    assert set().union(*(f.source_lines for f in result.fusions)) == body_lines
