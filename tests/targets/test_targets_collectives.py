"""Collectives parsing (both replica-group syntaxes, host crossing) and compare() on HLO text."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from nbcompile.targets import collectives, compare, expand_replica_groups, hlo_summary

HLO = """HloModule jit_step, is_scheduled=true, num_partitions=8

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%fused_computation (p: f32[4,32]) -> f32[4,32] {
  %p = f32[4,32]{1,0} parameter(0)
  ROOT %t = f32[4,32]{1,0} tanh(%p)
}

ENTRY %main.0_spmd (x: f32[4,64], w: f32[64,32]) -> (f32[4,32], bf16[16,32]) {
  %x = f32[4,64]{1,0} parameter(0), sharding={devices=[4,1,2]<=[8] last_tile_dim_replicate}
  %w = f32[64,32]{1,0} parameter(1)
  %dot = f32[4,32]{1,0} dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %all-reduce = f32[4,32]{1,0} all-reduce(%dot), channel_id=1, replica_groups={{0,1},{2,3},{4,5},{6,7}}, use_global_device_ids=true, to_apply=%add, metadata={op_name="jit(step)/dot_general" stack_frame_id=3}
  %fusion = f32[4,32]{1,0} fusion(%all-reduce), kind=kLoop, calls=%fused_computation
  %cvt = bf16[4,32]{1,0} convert(%fusion)
  %all-gather-start = (bf16[4,32]{1,0}, bf16[16,32]{1,0}) all-gather-start(%cvt), channel_id=2, replica_groups=[2,4]<=[4,2]T(1,0), dimensions={0}, use_global_device_ids=true, metadata={op_name="jit(step)/concat"}
  %all-gather-done = bf16[16,32]{1,0} all-gather-done(%all-gather-start)
  %cp = f32[4,32]{1,0} collective-permute(%fusion), channel_id=3, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  ROOT %tuple = (f32[4,32]{1,0}, bf16[16,32]{1,0}) tuple(%cp, %all-gather-done)
}
"""


@dataclass
class FakeDevice:
    id: int
    process_index: int


def test_expand_replica_groups_both_syntaxes():
    assert expand_replica_groups("{{0,1},{2,3}}") == [[0, 1], [2, 3]]
    assert expand_replica_groups("{}") == []
    assert expand_replica_groups("[2,4]<=[8]") == [[0, 1, 2, 3], [4, 5, 6, 7]]
    # iota over a 4x2 grid, transposed: groups gather every second id
    assert expand_replica_groups("[2,4]<=[4,2]T(1,0)") == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert expand_replica_groups(None) is None


def test_expand_replica_groups_mesh_axes_syntax():
    # devices row-major over the mesh; one group per value of the axes not named
    mesh = "mesh['data'=4,'model'=2]"
    assert expand_replica_groups(f"{mesh} {{'data'}}") == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert expand_replica_groups(f"{mesh} {{'model'}}") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert expand_replica_groups(f"{mesh} {{'model','data'}}") == [list(range(8))]
    # sub-axes 'a':(pre-size)size of a size-8 axis
    assert expand_replica_groups("mesh['a'=8] {'a':(1)2}") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert expand_replica_groups("mesh['a'=8] {'a':(2)4}") == [[0, 1, 2, 3], [4, 5, 6, 7]]
    # not understood (explicit device_ids, unknown axis): None, never a guess
    assert expand_replica_groups("mesh['a'=2,'b'=2], device_ids=(0,2,1,3) {'a'}") is None
    assert expand_replica_groups("mesh['a'=4] {'b'}") is None


def test_mesh_axes_groups_decide_crosses_hosts():
    text = HLO.replace(
        "replica_groups={{0,1},{2,3},{4,5},{6,7}}",
        "replica_groups=mesh['data'=4,'model'=2] {'model'}",
    )
    (ar, *_) = collectives(text, [FakeDevice(i, i // 2) for i in range(8)])
    assert ar["groups"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert ar["replica_groups"] == "mesh['data'=4,'model'=2] {'model'}"
    assert ar["crosses_hosts"] is False  # read as "every device" it would cross hosts


def test_collectives_ops_groups_bytes_and_source():
    found = collectives(HLO)
    assert [c["op"] for c in found] == ["all-reduce", "all-gather", "collective-permute"]
    ar, ag, cp = found
    assert ar["groups"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert ar["bytes"] == 4 * 32 * 4 and ar["operand_bytes"] == 4 * 32 * 4
    assert ar["op_name"] == "jit(step)/dot_general"
    assert ar["crosses_hosts"] is None  # no devices given
    assert ag["groups"] == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert ag["bytes"] == 16 * 32 * 2  # the gathered bf16 buffer, not the input
    assert ag["operand_bytes"] == 4 * 32 * 2
    assert cp["groups"] == [[0, 1], [1, 2], [2, 3], [3, 0]]


@pytest.mark.parametrize(
    ("hosts", "expected"),
    [
        ([0, 0, 0, 0, 0, 0, 0, 0], [False, False, False]),
        ([0, 0, 1, 1, 2, 2, 3, 3], [False, True, True]),  # pairs stay on a host
        ([0, 1, 0, 1, 0, 1, 0, 1], [True, False, True]),
    ],
)
def test_crosses_hosts_from_device_process_index(hosts, expected):
    devices = [FakeDevice(i, h) for i, h in enumerate(hosts)]
    assert [c["crosses_hosts"] for c in collectives(HLO, devices)] == expected


def test_hlo_summary_counts_kernels_not_bookkeeping():
    summary = hlo_summary(HLO)
    # dot, all-reduce, fusion, convert, all-gather-start, collective-permute
    assert summary["kernels"] == 6
    assert summary["fusions"] == 1
    assert {"dot", "all-reduce", "tanh", "all-gather-done"} <= set(summary["ops"])
    assert "parameter" not in summary["ops"]


def test_compare_reports_what_differs():
    other = HLO.replace(
        "%cvt = bf16[4,32]{1,0} convert(%fusion)", "%cvt = bf16[4,32]{1,0} copy(%fusion)"
    )
    result = compare(
        [
            ("A", HLO, {"flops": 10.0, "optimal_seconds": 2e-6}, {"temp": 64}),
            ("B", other, None, None),
        ]
    )
    assert result["only_in"] == {"A": ["convert"], "B": ["copy"]}
    text = result.text()
    assert text.splitlines()[0] == "A makes 6 kernels, B makes 6 kernels"
    assert "2.00 µs" in text and "only in A: convert" in text
