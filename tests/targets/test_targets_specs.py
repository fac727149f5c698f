"""Target, mesh and sharding specifications: what is accepted and the errors for the rest."""

from __future__ import annotations

import pytest
from jax.sharding import PartitionSpec as P

import nbcompile
from nbcompile.errors import TargetError
from nbcompile.targets import _resolve as resolve_module
from nbcompile.targets import parse_mesh, parse_shard_specs, resolve_target

from .helpers import mlp, mlp_args


def test_parse_mesh_shapes_and_names():
    assert parse_mesh("4x2") == ((4, 2), ("data", "model"))
    assert parse_mesh("8") == ((8,), ("data",))
    assert parse_mesh(" 2x2x2:a,b,c ") == ((2, 2, 2), ("a", "b", "c"))


@pytest.mark.parametrize("spec", ["", "4x", "4xtwo", "0x2", "4x2:data", "4x2:a,a", "2x2:1a,b"])
def test_bad_mesh_is_nbc601_quoting_the_spec(spec):
    with pytest.raises(TargetError) as info:
        parse_mesh(spec)
    assert info.value.code == "NBC601"
    assert repr(spec) in str(info.value)
    assert "--mesh 4x2" in str(info.value)  # an example of a correct one


def test_parse_shard_specs_forms():
    specs = parse_shard_specs(
        ["x=data,None", "w=(None, model)", "b=_,model", "z=data+model", "s="], ("data", "model")
    )
    assert specs == {
        "x": P("data", None),
        "w": P(None, "model"),
        "b": P(None, "model"),
        "z": P(("data", "model")),
        "s": P(),
    }
    assert parse_shard_specs({"params.w1": "None,model"}) == {"params.w1": P(None, "model")}


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("x", "ARG=SPEC"),
        ("x=batch,None", "no mesh axis 'batch'"),
        ("x=data,data", "used twice"),
        ("=data", "ARG=SPEC"),
        ("x=da-ta", "not an axis name"),
    ],
)
def test_bad_shard_spec_is_nbc601(entry, why):
    with pytest.raises(TargetError) as info:
        parse_shard_specs([entry], ("data", "model"))
    assert info.value.code == "NBC601"
    assert repr(entry) in str(info.value)
    assert why in str(info.value)
    assert "x=data,None" in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "legal"),
    [
        ({"backend": "quantum"}, "cpu, gpu, tpu"),
        ({"backend": "tpu", "topology": "v9z:2x2"}, "v5e"),
        ({"backend": "tpu", "topology": "banana"}, "v5e:2x2"),
        ({"backend": "tpu", "topology": "v5e:0x0"}, "v5e:2x2"),
        ({"backend": "tpu", "topology": "v5e:99999x99999"}, "v5e:2x2"),
        ({"backend": "gpu", "gpu": "rtx9999"}, "h100"),
        ({"backend": "gpu", "gpu": "h100", "topology": "2x2"}, "1x2x4"),
        ({"backend": "cpu", "topology": "v5e:2x2"}, "--backend tpu"),
        ({"backend": "tpu", "gpu": "h100"}, "--topology"),
    ],
)
def test_unknown_backend_topology_target_is_nbc600_with_legal_values(kwargs, legal):
    with pytest.raises(TargetError) as info:
        resolve_target(**kwargs)
    assert info.value.code == "NBC600"
    assert legal in str(info.value)


def test_default_target_is_the_local_cpu():
    t = resolve_target()
    assert (t.platform, t.present, t.deviceless, t.lower_only) == ("cpu", True, False, False)
    assert t.note is None and t.mesh is None and len(t.devices) >= 1


def test_cpu_mesh_larger_than_devices_names_xla_flags():
    with pytest.raises(TargetError) as info:
        resolve_target(mesh="64x2")
    assert info.value.code == "NBC601"
    assert "xla_force_host_platform_device_count=128" in str(info.value)


def test_shard_without_mesh_and_unknown_argument_are_nbc601(monkeypatch):
    params, x = mlp_args()
    with pytest.raises(TargetError) as info:
        nbcompile.compile(mlp, params, x, shard={"x": "data"})
    assert info.value.code == "NBC601" and "--mesh" in str(info.value)
    # a mesh can be described without the devices when only lowering
    monkeypatch.setattr(resolve_module, "_libtpu_available", lambda: False)
    with pytest.raises(TargetError) as info:
        nbcompile.compile(mlp, params, x, backend="tpu", mesh="2x2", shard={"y": "data,None"})
    assert info.value.code == "NBC601"
    assert "'y'" in str(info.value) and "params, x" in str(info.value)
    with pytest.raises(TargetError) as info:
        nbcompile.compile(mlp, params, x, backend="tpu", mesh="2x2", shard={"x": "data,None,model"})
    assert "3 entries" in str(info.value) and "2 dimensions" in str(info.value)


def test_indivisible_dimension_is_nbc601(monkeypatch):
    monkeypatch.setattr(resolve_module, "_libtpu_available", lambda: False)
    params, x = mlp_args(batch=6)
    with pytest.raises(TargetError) as info:
        nbcompile.compile(mlp, params, x, backend="tpu", mesh="4x1", shard={"x": "data,None"})
    assert info.value.code == "NBC601"
    assert "size 6" in str(info.value) and "data (4 devices)" in str(info.value)
