"""The parts of the memory map: sizes as XLA allocates them, capacity table, dump readers."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from nbcompile.analysis.memory_sizes import (
    array_bytes,
    input_output_alias,
    memory_space,
    split_tuple,
)
from nbcompile.analysis.memory_xla import hbm_oom_figures, parse_live_range
from nbcompile.targets._capacity import SPEC_CAPACITY, device_capacity, spec_capacity

GIB = 2**30


@pytest.mark.parametrize(
    ("shape", "padded", "plain"),
    [
        ("f32[4096,4096]{1,0}", 4096 * 4096 * 4, 4096 * 4096 * 4),
        ("f32[]{:T(128)}", 512, 4),  # a TPU scalar fills a 128-lane tile
        ("f32[8,50000]{1,0:T(8,128)S(1)}", 8 * 50048 * 4, 8 * 50000 * 4),
        ("bf16[3,5]{1,0:T(8,128)(2,1)}", 8 * 128 * 2, 3 * 5 * 2),
        ("f32[5,3]{0,1:T(8,128)}", 8 * 128 * 4, 5 * 3 * 4),  # column-major: dim 0 is minor
        ("pred[10]{0}", 10, 10),
        ("s4[7]{0}", 4, 4),
    ],
)
def test_array_bytes_pads_tiles_like_xla(shape, padded, plain):
    assert array_bytes(shape) == padded
    assert array_bytes(shape, padded=False) == plain


def test_memory_space_and_tuples():
    assert memory_space("f32[8,128]{1,0:T(8,128)S(1)}") == 1
    assert memory_space("f32[8,128]{1,0}") == 0
    shape = "(f32[]{:T(128)}, /*index=1*/f32[2,3]{1,0}, (s32[], u32[]{:S(2)}))"
    assert split_tuple(shape) == ["f32[]{:T(128)}", "f32[2,3]{1,0}", "(s32[], u32[]{:S(2)})"]
    assert split_tuple("f32[2]{0}") is None


def test_donated_outputs_are_read_from_the_module_header():
    header = (
        "HloModule jit_step, is_scheduled=true, input_output_alias={ {0}: (0, {}, "
        "may-alias), {1}: (2, {}, may-alias) }, entry_computation_layout={()->()}\n"
    )
    assert input_output_alias(header) == {(0,): 0, (1,): 2}
    assert input_output_alias("HloModule m, is_scheduled=true\n") == {}


def test_xla_oom_message_figures():
    text = (
        "RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: Ran out of memory on HBM, the total "
        "memory required for HLO temporaries (18.65G) exceeds available HBM (15.75G)."
    )
    need, have = hbm_oom_figures(text)
    assert need == int(18.65 * GIB) and have == int(15.75 * GIB)
    assert hbm_oom_figures("INVALID_ARGUMENT: something else") is None


def test_live_range_reader():
    text = """HloLiveRange (max 3):
  InstructionSequence:
    0:p
    1:f
    2:t
  BufferLiveRange:
    p{}:0-3
    f{}:1-3
  Live ranges at 1 (peak):
    p{}: 16 bytes (cumulative: 16 bytes)
    f{}: 8 bytes (cumulative: 24 bytes)
"""
    lr = parse_live_range(text)
    assert lr.sequence == ["p", "f", "t"] and lr.ranges == {"p{}": (0, 3), "f{}": (1, 3)}
    assert (lr.peak_step, lr.peak_bytes, lr.at_peak) == (1, 24, {"p{}": 16, "f{}": 8})


def test_capacity_spec_table_covers_the_chips_and_gpus_with_sources():
    for key in (
        "tpu v4",
        "tpu v5e",
        "tpu v5p",
        "tpu v6e",
        "gpu v100",
        "gpu a100",
        "gpu h100",
        "gpu h200",
        "gpu b200",
    ):
        entry = SPEC_CAPACITY[key]
        assert entry.bytes > 8 * GIB and entry.reference.startswith("https://")
    assert SPEC_CAPACITY["tpu v5e"].bytes == 16 * GIB
    assert spec_capacity("v5e:2x2")[0] == "tpu v5e"
    assert spec_capacity("TPU v5 lite")[0] == "tpu v5e"  # the device_kind JAX reports
    assert spec_capacity("NVIDIA H100 80GB HBM3")[0] == "gpu h100"
    assert spec_capacity("v3:2x2") is None


def test_device_capacity_for_targets():
    tpu = SimpleNamespace(
        platform="tpu", present=False, topology="v6e:2x2", gpu_target=None, devices=[]
    )
    assert device_capacity(tpu)[:2] == (32 * GIB, "spec")
    gpu = SimpleNamespace(
        platform="cuda", present=False, topology="1x1x1", gpu_target="h200", devices=[]
    )
    size, source, label = device_capacity(gpu)
    assert (size, source) == (141 * GIB, "spec") and "H200" in label
    assert device_capacity(None, "cpu")[:2] == (None, None)
    unknown = SimpleNamespace(
        platform="tpu", present=False, topology="v3:2x2", gpu_target=None, devices=[]
    )
    assert device_capacity(unknown)[:2] == (None, None)


def test_a_present_device_reports_its_own_limit():
    class Device:
        device_kind = "NVIDIA H100 80GB HBM3"

        def memory_stats(self):
            return {"bytes_limit": 79 * GIB, "peak_bytes_in_use": 0}

    present = SimpleNamespace(
        platform="cuda", present=True, topology=None, gpu_target=None, devices=[Device()]
    )
    assert device_capacity(present)[:2] == (79 * GIB, "measured")
