"""Issue 28 item 12 (SPEC §8.4): planning at real size.

``jax.ShapeDtypeStruct`` arguments carrying a ``NamedSharding`` over a mesh are compiled with
that sharding; under ``--mesh`` (and a deviceless ``--topology``) every figure of
``c.memory_map`` is per device, and ``c.memory_options(batch_axis=0).largest_batch`` is the
largest batch that fits, with the peak and verdict of the compile at that size. The figures
are checked against a hand computation. The model is the data-parallel pattern of JAX's
distributed-arrays guide (a batch sharded over ``data``, replicated weights). It runs in a
child process with 8 virtual CPU devices (the device count is fixed when JAX starts).
"""

from __future__ import annotations

import importlib.util

import pytest

from ..helpers import EIGHT_CPU_DEVICES, child_json

CHILD = r"""
import json, sys
import jax, jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
import nbcompile

mesh = jax.make_mesh((8,), ("data",))

def predict(w, x):
    h = jnp.tanh(x @ w)
    return (h @ w.T).sum()

def planned(c, **kw):
    m = c.memory_map
    o = c.memory_options(batch_axis=0, policies=(), donate=False, **kw)
    big = o.largest_batch
    return {
        "devices": m.devices,
        "per_device_shapes": {k: [list(a), list(b)] for k, a, b in
                              [(k, *v) for k, v in c.placement.per_device_shapes.items()]},
        "argument_bytes": m.xla.get("argument_bytes"),
        "peak": m.peak_bytes,
        "required": m.required_bytes,
        "capacity": o.capacity_bytes,
        "batch": o.batch.to_json(),
        "largest": None if big is None else {
            "size": big.size, "peak": big.peak_bytes, "required": big.required_bytes,
            "fits": big.fits, "devices": big.devices, "axis": big.axis,
            "headroom": big.headroom_bytes, "text": big.text(),
        },
        "text": o.text(),
    }

out = {}
w = jax.ShapeDtypeStruct((512, 512), jnp.float32, sharding=NamedSharding(mesh, P()))
x = jax.ShapeDtypeStruct((256, 512), jnp.float32, sharding=NamedSharding(mesh, P("data", None)))
c = nbcompile.compile(predict, w, x, mesh="8:data")
out["cpu"] = planned(c, capacity=4 << 20)
c = nbcompile.compile(predict, w, x)  # no --mesh: the arguments' own shardings
out["own"] = planned(c, capacity=4 << 20)
# the sharding given by --shard over --mesh, not carried by the arguments
w0, x0 = (jax.ShapeDtypeStruct(a.shape, a.dtype) for a in (w, x))
c = nbcompile.compile(predict, w0, x0, mesh="8:data", shard={"x": "data,None"})
out["shard"] = planned(c, capacity=(4 << 20) + 3000)
if sys.argv[1] == "tpu":
    w0 = jax.ShapeDtypeStruct((4096, 4096), jnp.bfloat16)
    x0 = jax.ShapeDtypeStruct((1024, 4096), jnp.bfloat16)
    c = nbcompile.compile(
        predict, w0, x0, backend="tpu", topology="v5e:2x2", mesh="4:data",
        shard={"x": "data,None"},
    )
    out["tpu_shard"] = planned(c)
    w = jax.ShapeDtypeStruct((4096, 4096), jnp.bfloat16, sharding=NamedSharding(mesh, P()))
    x = jax.ShapeDtypeStruct(
        (1024, 4096), jnp.bfloat16, sharding=NamedSharding(mesh, P("data", None))
    )
    c = nbcompile.compile(predict, w, x, backend="tpu", topology="v5e:2x4")
    out["tpu"] = planned(c)
print(json.dumps(out))
"""

HAS_LIBTPU = importlib.util.find_spec("libtpu") is not None


@pytest.fixture(scope="module")
def planned() -> dict:
    which = "tpu" if HAS_LIBTPU else "cpu"
    return child_json(["-c", CHILD, which], env=EIGHT_CPU_DEVICES, timeout=600)


def test_sharded_shape_dtype_structs_give_per_device_figures(planned):
    got = planned["cpu"]
    assert got["devices"] == 8
    # the batch is split over the 8 devices of `data`; the weights are replicated
    assert got["per_device_shapes"]["x"] == [[256, 512], [32, 512]]
    assert got["per_device_shapes"]["w"] == [[512, 512], [512, 512]]
    # by hand, per device: all of w, an eighth of x (float32)
    assert got["argument_bytes"] == 512 * 512 * 4 + 32 * 512 * 4
    assert got["peak"] >= got["argument_bytes"]
    assert "per device (8 devices)" in got["text"]


def test_without_mesh_the_arguments_own_sharding_gives_per_device_figures(planned):
    own, mesh = planned["own"], planned["cpu"]
    assert own["devices"] == 8 and own["largest"]["devices"] == 8
    assert own["argument_bytes"] == mesh["argument_bytes"]
    assert own["largest"]["size"] == mesh["largest"]["size"]


def test_largest_batch_is_confirmed_by_its_own_compile(planned):
    got = planned["cpu"]
    batch, big, cap = got["batch"], got["largest"], got["capacity"]
    assert cap == 4 << 20 and big is not None
    (b1, y1), (b2, y2) = batch["tried"][:2]
    assert (b1, b2) == (256, 512) and y2 == y1 + (b2 - b1) * 256
    # per device, one more example of x costs 512 float32 / 8 devices = 256 bytes: the
    # sharding is kept at every size (unsharded it would be 2048)
    assert batch["per_example_bytes"] == 256.0
    assert batch["step"] == 8
    # by hand: the largest multiple of 8 whose allocation stays within the budget
    want = int(b1 + (cap - y1) / 256) // 8 * 8
    assert big["size"] == want == batch["predicted"] and batch["confirmed"] is True
    assert big["fits"] is True and big["devices"] == 8 and big["axis"] == 0
    assert big["required"] == y1 + (want - b1) * 256 <= cap < big["required"] + 8 * 256
    assert big["peak"] <= big["required"] and big["headroom"] == cap - big["required"]
    assert [want, big["peak"]] in batch["peaks"]
    assert "fits" in big["text"] and "per device (8 devices)" in big["text"]


@pytest.mark.skipif(not HAS_LIBTPU, reason="needs the [tpu] extra (deviceless TPU compiles)")
def test_largest_batch_for_a_tpu_topology_is_per_chip(planned):
    got = planned["tpu"]
    assert got["devices"] == 8 and got["per_device_shapes"]["x"] == [[1024, 4096], [128, 4096]]
    # by hand, per chip: all of w, an eighth of x (bfloat16)
    assert got["argument_bytes"] == 4096 * 4096 * 2 + 128 * 4096 * 2
    big, cap, tried = got["largest"], got["capacity"], got["batch"]["tried"]
    assert big is not None and big["fits"] is True and big["required"] <= cap
    assert big["size"] % 8 == 0 and big["size"] > 1000 * 1024
    # XLA's own verdict brackets it: a larger size was compiled and does not fit
    assert any(b > big["size"] and need > cap for b, need in tried)
    # x alone takes 1 KiB per example per chip: the batch is bounded by the chip's memory
    assert big["size"] * 4096 * 2 // 8 < cap


def test_a_batch_sharded_by_shard_over_mesh_stays_a_multiple_of_the_mesh_axis(planned):
    """Issue 40 item 9: the sharding given by ``--shard x=data,None --mesh 8:data`` (the
    arguments carry none) keeps every size tried a multiple of ``data``'s 8 devices."""
    got, own = planned["shard"], planned["cpu"]
    assert got["devices"] == 8 and got["per_device_shapes"]["x"] == [[256, 512], [32, 512]]
    batch, big = got["batch"], got["largest"]
    assert batch["step"] == 8 and batch["per_example_bytes"] == 256.0
    assert all(b % 8 == 0 for b, _ in batch["tried"])
    # the same figures as the arguments carrying the sharding themselves
    assert batch["tried"][:2] == own["batch"]["tried"][:2]
    # by hand: the largest multiple of 8 within the budget (not a multiple of 8 unrounded)
    (b1, y1) = batch["tried"][0]
    cap = got["capacity"]
    assert (b1 + (cap - y1) // 256) % 8 != 0
    want = int(b1 + (cap - y1) / 256) // 8 * 8
    assert big is not None and big["size"] == want and big["fits"] is True


@pytest.mark.skipif(not HAS_LIBTPU, reason="needs the [tpu] extra (deviceless TPU compiles)")
def test_a_batch_sharded_by_shard_over_a_tpu_mesh_stays_a_multiple_of_it(planned):
    """Issue 40 item 9 as reported: ``--shard x=data,None --mesh 4:data`` on a v5e:2x2
    topology extrapolated to batch 1,428,306 and failed with NBC601."""
    got = planned["tpu_shard"]
    assert got["devices"] == 4 and got["per_device_shapes"]["x"] == [[1024, 4096], [256, 4096]]
    batch, big, cap = got["batch"], got["largest"], got["capacity"]
    assert batch["step"] == 4 and all(b % 4 == 0 for b, _ in batch["tried"])
    assert big is not None and big["fits"] is True and big["required"] <= cap
    assert big["size"] % 4 == 0 and big["size"] > 1000 * 1024
