"""Mesh compiles on 8 virtual CPU devices (a subprocess: the device count is fixed at start-up)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ..helpers import EIGHT_CPU_DEVICES, child_json

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def mesh_result() -> dict:
    return child_json([str(HERE / "mesh_child.py"), "4x2"], env=EIGHT_CPU_DEVICES, timeout=120)


def test_mesh_uses_eight_devices(mesh_result):
    assert mesh_result["devices"] == 8
    assert mesh_result["mesh"] == {"data": 4, "model": 2}
    assert mesh_result["hosts"] == 1


def test_per_device_shapes_follow_the_sharding(mesh_result):
    shapes = mesh_result["per_device_shapes"]
    mesh = mesh_result["mesh"]
    (gx, px) = shapes["x"]
    assert px == [gx[0] // mesh["data"], gx[1]]
    (gw1, pw1) = shapes["params.w1"]
    assert pw1 == [gw1[0], gw1[1] // mesh["model"]]
    (gw2, pw2) = shapes["params.w2"]
    assert pw2 == [gw2[0] // mesh["model"], gw2[1]]
    (gout, pout) = shapes["output"]
    assert pout[0] == gout[0] // mesh["data"]
    assert mesh_result["input_shardings"]["params.w2"] == "model,None"
    assert mesh_result["output_shardings"]["output"].startswith("data")


def test_row_split_matmul_needs_an_all_reduce_over_model(mesh_result):
    found = mesh_result["collectives"]
    reduces = [c for c in found if c["op"] == "all-reduce"]
    assert reduces, found
    ar = reduces[0]
    # w2 is split over its contraction dim: partial sums are added across "model" (pairs)
    mesh = mesh_result["mesh"]
    assert all(len(g) == mesh["model"] for g in ar["groups"])
    assert sorted(i for g in ar["groups"] for i in g) == list(range(8))
    _, per_device_out = mesh_result["per_device_shapes"]["output"]
    assert ar["bytes"] == 4 * math.prod(per_device_out)
    assert ar["crosses_hosts"] is False
    assert "dot_general" in (ar["op_name"] or "")


def test_mesh_larger_than_the_devices_is_nbc601(mesh_result):
    assert mesh_result["too_big"] == "NBC601"


@pytest.mark.slow
def test_shard_map_guide_example_keeps_its_shardings():
    """JAX's shard_map guide example: arguments sharded by the user over an Explicit mesh are
    compiled with their own shardings (--mesh and the default), and a deviceless TPU compile
    either works (abstract mesh) or says the function is bound to this machine's devices."""
    child = Path(__file__).with_name("shardmap_child.py")
    out = child_json([str(child)], env=EIGHT_CPU_DEVICES)
    for name in ("here", "mesh"):
        assert out[name]["runnable"]
        assert out[name]["collectives"], out[name]
    assert out["mesh"]["shardings"] == {"a_block": "x,y", "b_block": "y,None"}
    assert out["tpu_concrete"] == ["NBC600", True]
    tpu = out["tpu_abstract"]
    assert tpu["mesh"] == {"x": 4, "y": 2}
    assert tpu["shardings"] == {"a_block": "x,y", "b_block": "y,None"}
    assert "all-reduce" in tpu["collectives"]
