"""GPU targets: the target descriptions, and deviceless XLA:GPU compiles (``gpu_deviceless``).

The deviceless tests need the JAX CUDA plugin (``pip install "jax[cuda12]==<jax version>"``,
about 5.5 GB) and are not part of ``make test``; run them with
``JAX_PLATFORMS=cpu .venv/bin/pytest tests/targets -m gpu_deviceless`` (docs/targets.md).
"""

from __future__ import annotations

import re
from pathlib import Path

import jax
import pytest

import nbcompile
from nbcompile.targets import GPU_TARGETS, gpu_target_config, resolve_target
from nbcompile.targets import _resolve as resolve_module

from .helpers import mlp, mlp_args

needs_cuda_plugin = pytest.mark.skipif(
    not resolve_module._cuda_plugin_available(),
    reason=f'needs the JAX CUDA plugin: pip install "jax[cuda12]=={jax.__version__}"',
)


def _config_fields(text: str) -> dict[str, set[str]]:
    """{message path: field names} of a text-format proto (nested ``name { ... }`` blocks)."""
    fields: dict[str, set[str]] = {}
    stack = [""]
    for token in re.findall(r"[A-Za-z_]\w*\s*\{|[A-Za-z_]\w*\s*:|\}", text):
        if token == "}":
            stack.pop()
        elif token.endswith("{"):
            name = token[:-1].strip()
            fields.setdefault(stack[-1], set()).add(name)
            stack.append(f"{stack[-1]}.{name}".lstrip("."))
        else:
            fields.setdefault(stack[-1], set()).add(token[:-1].strip())
    return fields


def _file_descriptor(data: bytes, name: bytes, descriptor_pb2) -> object | None:
    """The serialized FileDescriptorProto ``name`` embedded in a shared library, parsed."""
    at = data.find(bytes([0x0A, len(name)]) + name)
    if at < 0:
        return None
    for end in range(at + 20000, at, -1):  # its length is unknown: the longest that parses
        try:
            proto = descriptor_pb2.FileDescriptorProto.FromString(data[at:end])
        except Exception:
            continue
        if proto.name == name.decode() and proto.message_type:
            return proto
    return None


def _jaxlib_schema() -> dict[str, set[str]] | None:
    """Field names of GpuTargetConfigProto and its nested messages, read from this jaxlib."""
    descriptor_pb2 = pytest.importorskip("google.protobuf.descriptor_pb2")
    import jaxlib

    lib = Path(jaxlib.__file__).parent / "libjax_common.so"
    if not lib.exists():
        return None
    data = lib.read_bytes()
    messages = {}
    for name in (
        b"xla/stream_executor/device_description.proto",
        b"xla/stream_executor/cuda/cuda_compute_capability.proto",
    ):
        proto = _file_descriptor(data, name, descriptor_pb2)
        if proto is None:
            return None
        messages.update({m.name: m for m in proto.message_type})
    if "GpuTargetConfigProto" not in messages:
        return None

    def walk(message: str, path: str, out: dict[str, set[str]]) -> None:
        out[path] = {f.name for f in messages[message].field}
        for f in messages[message].field:
            short = f.type_name.rsplit(".", 1)[-1]
            if short in messages:
                walk(short, f"{path}.{f.name}".lstrip("."), out)

    schema: dict[str, set[str]] = {}
    walk("GpuTargetConfigProto", "", schema)
    return schema


@pytest.mark.parametrize("name", sorted(GPU_TARGETS))
def test_gpu_configs_describe_the_gpu(name):
    spec = GPU_TARGETS[name]
    text = gpu_target_config(name)
    assert f"core_count: {spec.sm_count}" in text
    assert f"major: {spec.compute_capability[0]} minor: {spec.compute_capability[1]}" in text
    assert 'platform_name: "CUDA"' in text
    assert text.count("{") == text.count("}")


def test_gpu_configs_use_only_fields_this_jaxlib_parses():
    schema = _jaxlib_schema()
    if schema is None:
        pytest.skip("could not read GpuTargetConfigProto's descriptor from this jaxlib")
    assert "core_count" in schema["gpu_device_info"]
    for name in GPU_TARGETS:
        for path, names in _config_fields(gpu_target_config(name)).items():
            assert path in schema, (name, path)
            assert names <= schema[path], (name, path, names - schema[path])


def test_gpu_compute_capabilities():
    assert GPU_TARGETS["v100"].compute_capability == (7, 0)
    assert GPU_TARGETS["a100"].compute_capability == (8, 0)
    assert (
        GPU_TARGETS["h100"].compute_capability == GPU_TARGETS["h200"].compute_capability == (9, 0)
    )
    assert GPU_TARGETS["b200"].compute_capability == (10, 0)
    assert GPU_TARGETS["h200"].memory_bytes > GPU_TARGETS["h100"].memory_bytes


def test_gpu_target_from_a_txtpb_file(tmp_path, monkeypatch):
    monkeypatch.setattr(resolve_module, "_cuda_plugin_available", lambda: False)
    path = tmp_path / "my_gpu.txtpb"
    path.write_text(gpu_target_config("a100"))
    t = resolve_target("gpu", gpu=str(path))
    assert t.gpu == "my_gpu.txtpb" and t.lower_only


@pytest.mark.gpu_deviceless
@needs_cuda_plugin
@pytest.mark.parametrize(("name", "gemm"), [("h100", "triton"), ("v100", "cublas")])
def test_deviceless_gpu_compile(name, gemm):
    t = resolve_target("gpu", gpu=name)
    assert t.deviceless and t.platform == "cuda" and len(t.devices) == 1
    c = nbcompile.compile(mlp, *mlp_args(), backend="gpu", gpu=name)
    assert c.compiled is not None
    assert gemm in c.hlo.lower()  # H100: Triton GEMM fusions; V100: cuBLAS custom calls
    assert c.memory is not None and c.memory["argument_bytes"] > 0


@pytest.mark.gpu_deviceless
@needs_cuda_plugin
def test_deviceless_multi_host_gpu_collectives_cross_hosts():
    t = resolve_target("gpu", gpu="h100", topology="1x2x4", mesh="8")
    assert t.hosts == 2 and len(t.devices) == 8
    c = nbcompile.compile(
        mlp,
        *mlp_args(),
        backend="gpu",
        gpu="h100",
        topology="1x2x4",
        mesh="8",
        shard={"params.w2": "data,None"},
    )
    found = [k for k in c.collectives if k["op"] in ("all-reduce", "reduce-scatter")]
    assert found and all(k["crosses_hosts"] for k in found)


@pytest.mark.gpu_deviceless
@needs_cuda_plugin
def test_deviceless_gpu_compilation_has_fusions_with_lines_and_a_static_cost_estimate():
    c = nbcompile.compile(mlp, *mlp_args(), backend="gpu", gpu="h100")
    assert c.backend == "cuda" and c.fusions and all(f.source_lines for f in c.fusions)
    assert any("gemm" in f.name or "triton" in f.name for f in c.fusions)
    assert c.cost is not None and c.cost["estimate"] == "static" and c.cost["flops"] > 0
    assert any("static estimates" in n for n in c.report()["notes"])
    assert any("no autotuning" in n for n in c.notes)
