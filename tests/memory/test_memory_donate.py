"""``--memory --donate``: the map follows the donated program XLA compiled.

A donated argument's buffer is free after its last read: XLA places temporaries there and
writes the aliased output into it (``input_output_alias``). The map keeps XLA's live ranges
(the argument to its last read, the output from its definition), counts an in-place update
(the output written by the argument's last reader) once, and never exceeds XLA's allocation.
Checked against XLA's own dumps of the same program, with and without donation.
"""

from __future__ import annotations

import gzip
import importlib.util
import itertools
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import nbcompile
from nbcompile.analysis.hlo import parse_hlo
from nbcompile.analysis.memory import memory_map_from_hlo
from nbcompile.analysis.memory_live import liveness
from nbcompile.analysis.memory_xla import (
    parse_buffer_assignment,
    parse_live_range,
    parse_memory_usage_report,
)
from nbcompile.measure.memory import xla_memory_files
from tests.memory.test_memory_map import check_against_xla

DONATE = ("params", "m", "v")


def adam_step(params, m, v, x, y):
    """One Adam step written out by hand (no optax): 4 MB of weights, 8 MB of moments."""

    def loss(p):
        h = jnp.tanh(x @ p["w1"] + p["b1"][None, :])
        return jnp.mean((h @ p["w2"] - y) ** 2)

    value, g = jax.value_and_grad(loss)(params)
    m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, m, g)
    v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, v, g)
    params = jax.tree.map(lambda p, m, v: p - 1e-3 * m / (jnp.sqrt(v) + 1e-8), params, m, v)
    return params, m, v, value


def _args(make=jnp.ones):
    p = {"w1": make((512, 1024)), "b1": make((1024,)), "w2": make((1024, 512))}
    return p, p, p, make((64, 512)), make((64, 512))


def _struct(shape):
    return jax.ShapeDtypeStruct(shape, jnp.float32)


@pytest.fixture(scope="module")
def cpu():
    args = _args()
    plain = nbcompile.compile(adam_step, *args)
    donated = nbcompile.compile(adam_step, *args, donate_argnames=DONATE)
    return {
        "plain": (plain, xla_memory_files(plain.lowered)),
        "donated": (donated, xla_memory_files(donated.lowered)),
    }


@pytest.mark.parametrize("which", ["plain", "donated"])
def test_the_map_is_xlas_and_never_above_its_allocation(cpu, which):
    c, files = cpu[which]
    # every live range equals XLA's dump of this program, XLA's printed peak is reproduced,
    # the buffers at the peak are disjoint in XLA's buffer assignment (tests/memory)
    m = check_against_xla(c, files)
    assert m.peak_bytes <= m.allocated_bytes


def test_donation_is_the_program_mapped(cpu):
    (plain, plain_files), (donated, files) = cpu["plain"], cpu["donated"]
    mp, md = plain.memory_map, donated.memory_map
    assert "input_output_alias" in files.hlo_text.split("\n", 1)[0]
    assert md.xla["alias_bytes"] > 0 and mp.xla["alias_bytes"] == 0
    # XLA's printed figure is that of the donated program, not of the program without donation
    assert (
        md.xla_live_range_peak == files.live_range.peak_bytes != plain_files.live_range.peak_bytes
    )
    # donation frees the moments' and weights' old buffers: the peak drops, as XLA's allocation
    assert md.peak_bytes < mp.peak_bytes and md.allocated_bytes < mp.allocated_bytes


def test_an_in_place_update_is_counted_once(cpu):
    _, files = cpu["donated"]
    live = liveness(parse_hlo(files.hlo_text), files.hlo_text)
    params = {v.instruction: v for v in live.values if v.kind == "parameter"}
    numbers = {
        i.name: int(i.literal)
        for i in parse_hlo(files.hlo_text).entry_computation.instructions
        if i.opcode == "parameter"
    }
    by_number = {numbers[name]: v for name, v in params.items()}
    outputs = [v for v in live.values if v.aliased_parameter is not None]
    assert len(outputs) == 9  # params, m and v: three leaves each
    for out in outputs:
        arg = by_number[out.aliased_parameter]
        held = arg.end if arg.counted_end is None else arg.counted_end
        # one buffer: the argument holds it until the output is written there
        assert held < out.start
        assert arg.bytes == out.bytes


@pytest.mark.skipif(
    importlib.util.find_spec("libtpu") is None, reason='needs libtpu (pip install "nbcompile[tpu]")'
)
def test_donation_on_a_deviceless_tpu():
    args = _args(_struct)
    for donate in ((), DONATE):
        c = nbcompile.compile(
            adam_step, *args, backend="tpu", topology="v5e:2x2", donate_argnames=donate
        )
        files = xla_memory_files(c.lowered)
        live = liveness(parse_hlo(files.hlo_text), files.hlo_text, "tpu")
        ours = {v.label: (v.start, v.end) for v in live.values}
        assert {k: r for k, r in files.live_range.ranges.items() if ours.get(k) != r} == {}
        m = c.memory_map
        assert m.xla_live_range_peak == files.live_range.peak_bytes
        assert sum(b.bytes for b in m.at_peak) == m.peak_bytes <= m.allocated_bytes
        assert bool(m.xla["alias_bytes"]) == bool(donate)


DATA = Path(__file__).parent / "data"


def _gpu_file(suffix: str) -> str:
    return gzip.decompress((DATA / f"adam_h200{suffix}.txt.gz").read_bytes()).decode()


def test_a_gpu_adam_step_without_donation_stays_within_xlas_allocation():
    """XLA:GPU's own dumps of ``adam_step`` at n=2048 (192 MB of arguments), compiled without
    donation on an NVIDIA H200 with JAX 0.11.2 (``make gpu-check``'s machine; stored, so this
    runs anywhere). The Adam update is one multi-output fusion that writes the new moments over
    the dying gradients' buffers: the map hands them over as XLA's buffer assignment does."""
    hlo = _gpu_file("")
    ranges = parse_live_range(_gpu_file("-live-range"))
    allocations = parse_buffer_assignment(_gpu_file("-buffer-assignment"))
    usage = parse_memory_usage_report(_gpu_file("-memory-usage-report"))
    raw = json.loads((DATA / "adam_h200_memory_analysis.json").read_text())
    xla = {
        "argument_bytes": raw["argument_size_in_bytes"],
        "output_bytes": raw["output_size_in_bytes"],
        "temp_bytes": raw["temp_size_in_bytes"],
        "alias_bytes": raw["alias_size_in_bytes"],
    }
    live = liveness(parse_hlo(hlo), hlo, "cuda")
    ours = {v.label: (v.start, v.end) for v in live.values}
    assert len(ranges.ranges) > 40
    assert {k: r for k, r in ranges.ranges.items() if ours.get(k) != r} == {}
    m = memory_map_from_hlo(hlo, platform="cuda", xla_memory=xla)
    assert m.xla_live_range_peak == ranges.peak_bytes
    # never above what XLA allocates; here exactly XLA:GPU's own peak_memory_in_bytes
    assert m.peak_bytes <= m.allocated_bytes <= usage[0]
    assert m.peak_bytes == raw["peak_memory_in_bytes"]
    at_peak = {b.name for b in m.at_peak}
    for alloc in allocations:  # every buffer live at the peak has its own bytes in XLA's plan
        held = sorted(
            (off, off + size)
            for name, size, off, _ in alloc.values
            if (name if "{" in name else name + "{}") in at_peak
        )
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(held)), alloc.index
