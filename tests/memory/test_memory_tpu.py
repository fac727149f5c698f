"""Will it fit on a TPU that is not here? Deviceless v5e compiles through libtpu.

The weights are ``jax.ShapeDtypeStruct``\\ s: nothing is allocated, a 10 GB weight is planned on
a laptop. A program XLA:TPU refuses for lack of HBM is still mapped (XLA dumps it first).
"""

from __future__ import annotations

import importlib.util

import jax
import jax.numpy as jnp
import pytest

import nbcompile
from benchmarks.models import transformer_train_step
from nbcompile.analysis.hlo import parse_hlo
from nbcompile.analysis.memory_live import liveness
from nbcompile.measure.memory import memory_map_of_lowered, xla_memory_files
from nbcompile.targets import place_args, resolve_target

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("libtpu") is None, reason='needs libtpu (pip install "nbcompile[tpu]")'
)

V5E_CHIP = 16 * 2**30  # https://cloud.google.com/tpu/docs/v5e: 16 GB HBM2 per chip


def loss(w, x):
    return jnp.mean(jnp.tanh(x @ w) ** 2)


def _grad_lowered(n: int):
    target = resolve_target(backend="tpu", topology="v5e:2x2")
    w = jax.ShapeDtypeStruct((n, n), jnp.float32)
    x = jax.ShapeDtypeStruct((8, n), jnp.float32)
    placed = place_args((w, x), {}, target, names=["w", "x"], static=set())
    return jax.jit(jax.value_and_grad(loss)).trace(*placed.args).lower(), target


def test_a_50000_square_f32_weight_with_its_gradient_does_not_fit_a_v5e_chip():
    lowered, target = _grad_lowered(50_000)
    m = memory_map_of_lowered(lowered, target=target, program="value_and_grad")
    assert m.fits is False
    assert m.capacity_bytes == V5E_CHIP and m.capacity_source == "spec"
    assert "v5e" in m.capacity_label and "cloud.google.com/tpu/docs/v5e" in m.capacity_label
    weight = 50_000 * 50_000 * 4
    # the weight and its gradient are both in HBM at the peak: 2 x 10 GB
    assert m.peak_bytes >= 2 * weight and m.required_bytes >= m.peak_bytes
    assert m.headroom_bytes == V5E_CHIP - m.required_bytes < 0
    # XLA itself refused it (CompileTimeHbmOom), with its own figures
    assert m.xla["refused"] is True
    assert m.xla["oom_required_bytes"] > m.xla["oom_available_bytes"] > 15 * 2**30
    assert any("CompileTimeHbmOom" in n for n in m.notes)
    kinds = {b.kind for b in m.at_peak if b.bytes >= weight}
    assert kinds == {"parameter", "output"}
    assert "does NOT fit" in m.text()


def test_a_small_weight_fits_through_nbcompile_compile():
    w = jax.ShapeDtypeStruct((2000, 2000), jnp.float32)
    x = jax.ShapeDtypeStruct((8, 2000), jnp.float32)
    c = nbcompile.compile(loss, w, x, backend="tpu", topology="v5e:2x2", grad=True)
    m = c.memory_map
    assert m.program == "value_and_grad" and m.platform == "tpu"
    assert m.fits is True and m.capacity_bytes == V5E_CHIP
    assert 0 < m.required_bytes < m.headroom_bytes
    # padded TPU layouts: arguments as XLA counts them
    params = sum(b.bytes for b in m.at_peak if b.kind == "parameter")
    assert params == m.xla["argument_bytes"]
    # code and allocation are XLA's figures; VMEM is kept apart from HBM
    assert m.required_bytes == m.allocated_bytes + m.generated_code_bytes
    assert set(m.other_spaces) <= {1, 2} and m.peak_all_spaces >= m.peak_bytes


def test_tpu_live_ranges_equal_xla_dump():
    fn, args = transformer_train_step(n_layers=1, d=128, seq=32, heads=4)
    c = nbcompile.compile(fn, *args, backend="tpu", topology="v5e:2x2")
    files = xla_memory_files(c.lowered)
    live = liveness(parse_hlo(files.hlo_text), files.hlo_text, "tpu")
    ours = {v.label: (v.start, v.end) for v in live.values}
    assert len(files.live_range.ranges) > 100
    assert {k: r for k, r in files.live_range.ranges.items() if ours.get(k) != r} == {}
    m = c.memory_map
    # XLA's printed peak (all memory spaces, unpadded sizes) reproduced from the compiled program
    assert m.xla_live_range_peak == files.live_range.peak_bytes
    # the text XLA returns folds async wrapped computations into one op: same peak
    from nbcompile.analysis.memory import memory_map_from_hlo

    assert memory_map_from_hlo(files.hlo_text, platform="tpu").peak_bytes == m.peak_bytes
    assert sum(b.bytes for b in m.at_peak) == m.peak_bytes <= m.allocated_bytes


def test_a_mesh_gives_per_device_figures():
    w = jax.ShapeDtypeStruct((4096, 4096), jnp.float32)
    x = jax.ShapeDtypeStruct((64, 4096), jnp.float32)
    one = nbcompile.compile(loss, w, x, backend="tpu", topology="v5e:2x2")
    four = nbcompile.compile(
        loss, w, x, backend="tpu", topology="v5e:2x2", mesh="4:model", shard={"w": "None,model"}
    )
    m1, m4 = one.memory_map, four.memory_map
    assert (m1.devices, m4.devices) == (1, 4)
    weight = 4096 * 4096 * 4
    param1 = max(b.bytes for b in m1.at_peak if b.kind == "parameter")
    param4 = max(b.bytes for b in m4.at_peak if b.kind == "parameter")
    assert (param1, param4) == (weight, weight // 4)
    assert m4.peak_bytes < m1.peak_bytes / 2 and m1.program == "forward"
    assert "per device (4 devices)" in m4.text()
