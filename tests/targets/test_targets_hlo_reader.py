"""One HLO reader for targets and measure: the same figures as before, on real optimised modules.

``hlo_summary``, ``collectives`` and ``compare`` (nbcompile.targets) and ``entry_kernels`` /
``instructions`` (nbcompile.measure) read HLO through ``nbcompile.analysis.hlo`` now. Each had its
own reader before; ``EXPECTED`` holds what those readers gave (jax/jaxlib 0.10.2) on the programs of
``hlo_cases.py``, compiled here for CPU, 8 virtual CPU devices, TPU v5e and GPU
(deviceless). The modules are those JAX 0.10.2 compiled (stored in tests/data/hlo_cases, made by
``hlo_cases.py KIND`` under ``make test-compat``'s stack), so the comparison is of readers, not of
XLA versions; what the installed XLA compiles now is read by :func:`test_live_modules_read_consistently`
(JAX 0.12 prints replica groups in the iota and mesh-axes syntaxes where 0.10.2 printed lists).
Deliberate differences: the mesh-axes ``replica_groups`` syntax
(``mesh['axis_0'=8,'axis_1'=2] {'axis_1'}``) was read as one group of every device; it is expanded
now, which makes the v5e:4x4 gradient all-reduce over device pairs stay on one host. And one
definition of a kernel (``analysis.compiled.FREE_OPS``): ``entry_kernels`` no longer lists
``partition-id`` (bookkeeping, as ``hlo_summary`` already had it).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import pytest

from nbcompile.measure._hlo import entry_kernels, instructions
from nbcompile.targets import _resolve as resolve_module
from nbcompile.targets import collectives, compare, hlo_summary

from ..helpers import EIGHT_CPU_DEVICES, child_json
from .hlo_cases import compile_cases

HERE = Path(__file__).parent


@dataclass
class FakeDevice:
    process_index: int


def _collective(c: dict[str, Any]) -> str:
    """``op bytes/operand bytes crosses=... groups=0,1;2,3 | raw replica_groups | op_name``."""
    groups = None if c["groups"] is None else ";".join(",".join(map(str, g)) for g in c["groups"])
    return (
        f"{c['op']} {c['bytes']}/{c['operand_bytes']} crosses={c['crosses_hosts']} "
        f"groups={groups} | {c['replica_groups']} | {c['op_name']}"
    )


def _observed(text: str, hosts: list[int] | None) -> dict[str, Any]:
    summary = hlo_summary(text)
    every, entry = instructions(text), instructions(text, entry_only=True)
    assert summary["instructions"] == len(every)
    devices = [FakeDevice(h) for h in hosts] if hosts is not None else None
    return {
        "counts": (
            summary["kernels"],
            summary["fusions"],
            summary["custom_calls"],
            summary["instructions"],
            len(entry),
        ),
        "ops": " ".join(summary["ops"]),
        "kernels": " ".join(op for _, op in entry_kernels(text)),
        "collectives": [_collective(c) for c in collectives(text, devices)],
    }


def _check(kind: str, cases: dict[str, dict[str, Any]]) -> None:
    assert sorted(f"{kind}/{name}" for name in cases) == sorted(
        key for key in EXPECTED if key.startswith(f"{kind}/")
    )
    for name, case in cases.items():
        assert _observed(case["hlo"], case["hosts"]) == EXPECTED[f"{kind}/{name}"], name
    rows = [(name, case["hlo"], None, None) for name, case in cases.items()]
    result = compare(rows)
    assert [r["kernels"] for r in result["rows"]] == [
        EXPECTED[f"{kind}/{name}"]["counts"][0] for name in cases
    ]


needs_libtpu = pytest.mark.skipif(
    not resolve_module._libtpu_available(),
    reason='libtpu is not installed (pip install "nbcompile[tpu]")',
)
needs_cuda_plugin = pytest.mark.skipif(
    not resolve_module._cuda_plugin_available(),
    reason=f'needs the JAX CUDA plugin: pip install "jax[cuda12]=={jax.__version__}"',
)


STORED = HERE.parent / "data" / "hlo_cases"


def _stored(kind: str) -> dict[str, dict[str, Any]]:
    """The modules JAX/jaxlib 0.10.2 compiled for ``kind`` (see the module docstring)."""
    with gzip.open(STORED / f"{kind}.json.gz", "rt") as f:
        return json.load(f)


def test_cpu_modules_read_as_before():
    _check("cpu", _stored("cpu"))


def test_eight_device_cpu_modules_read_as_before():
    _check("cpu8", _stored("cpu8"))


def test_tpu_modules_read_as_before():
    _check("tpu", _stored("tpu"))


def test_mesh_axes_replica_groups_on_a_multi_host_tpu():
    cases = _stored("tpu4x4")
    _check("tpu4x4", cases)
    found = collectives(cases["train"]["hlo"], [FakeDevice(h) for h in cases["train"]["hosts"]])
    by_syntax = {c["replica_groups"].split("[")[0]: c for c in found}
    # the "model" reduction (iota syntax) spans hosts, the "data" one (mesh syntax) does not
    assert by_syntax[""]["crosses_hosts"] is True
    assert by_syntax["mesh"]["crosses_hosts"] is False


def _consistent(text: str, hosts: list[int] | None) -> None:
    """What holds for any module: one instruction count, every entry kernel among the
    instructions, every collective's groups made of the program's devices."""
    observed = _observed(text, hosts)
    kernels, _fusions, _custom, count, entry = observed["counts"]
    assert 0 < kernels <= entry <= count
    n = len(hosts) if hosts is not None else None
    for c in collectives(text, [FakeDevice(h) for h in hosts] if hosts else None):
        assert c["groups"], c  # every replica_groups syntax XLA prints is read
        members = sorted(d for g in c["groups"] for d in g)
        if n is not None:
            assert set(members) <= set(range(n)), c


def test_live_modules_read_consistently():
    """The installed XLA's own modules (JAX 0.12 prints other replica-group syntaxes)."""
    for case in compile_cases("cpu").values():
        _consistent(case["hlo"], case["hosts"])
    eight = child_json([str(HERE / "hlo_cases.py"), "cpu8"], env=EIGHT_CPU_DEVICES)
    for case in eight.values():
        _consistent(case["hlo"], case["hosts"])
    assert any(collectives(c["hlo"]) for c in eight.values())  # it did read some


@needs_libtpu
def test_live_tpu_modules_read_consistently():
    for case in compile_cases("tpu4x4").values():
        _consistent(case["hlo"], case["hosts"])


@pytest.mark.gpu_deviceless
@needs_cuda_plugin
@pytest.mark.parametrize("gpu", ["h100", "v100"])
def test_gpu_modules_read_as_before(gpu):
    _check(f"gpu-{gpu}", compile_cases("gpu", gpu))


EXPECTED: dict[str, dict[str, Any]] = {
    "cpu/mlp": {
        "counts": (3, 3, 0, 19, 7),
        "ops": "add bitcast broadcast dot fusion tanh",
        "kernels": "fusion fusion fusion",
        "collectives": [],
    },
    "cpu/loop": {
        "counts": (6, 4, 0, 35, 8),
        "ops": "add broadcast compare constant copy dot fusion get-tuple-element tanh tuple while",
        "kernels": "copy copy while",
        "collectives": [],
    },
    "cpu/branch": {
        "counts": (5, 5, 0, 43, 9),
        "ops": "add broadcast compare conditional constant convert cosine dot fusion get-tuple-element multiply reduce reduce-window sine tuple",
        "kernels": "fusion fusion conditional",
        "collectives": [],
    },
    "cpu/train": {
        "counts": (12, 10, 0, 77, 17),
        "ops": "add bitcast broadcast constant dot fusion multiply reduce subtract tanh tuple",
        "kernels": "fusion fusion fusion fusion fusion fusion dot fusion fusion fusion dot fusion",
        "collectives": [],
    },
    "cpu8/mlp": {
        "counts": (4, 3, 0, 23, 8),
        "ops": "add all-reduce bitcast broadcast dot fusion tanh",
        "kernels": "fusion fusion fusion all-reduce",
        "collectives": [
            "all-reduce 512/512 crosses=False groups=0,1;2,3;4,5;6,7 | {{0,1},{2,3},{4,5},{6,7}} | jit(mlp)/dot_general",
        ],
    },
    "cpu8/train": {
        "counts": (16, 12, 0, 99, 27),
        "ops": "add all-reduce bitcast broadcast constant copy dot fusion get-tuple-element multiply reduce subtract tanh transpose tuple",
        "kernels": "fusion fusion fusion all-reduce fusion fusion fusion dot fusion fusion dot all-reduce fusion fusion fusion fusion",
        "collectives": [
            "all-reduce 512/512 crosses=False groups=0,1;2,3;4,5;6,7 | {{0,1},{2,3},{4,5},{6,7}} | jit(train_step)/jvp(loss#1)/mlp#1/dot_general",
            "all-reduce 24836/24836 crosses=False groups=0,2,4,6;1,3,5,7 | mesh['axis_0'=4,'axis_1'=1,'axis_2'=2] {'axis_0'} | jit(train_step)/(jvp(loss#1)/mean/reduce_sum:transpose(jvp(loss#1))/mlp#1/reduce_sum:transpose(jvp(loss#1))/mlp#1/dot_general:transpose(jvp(loss#1))/mlp#1/dot_general)",
        ],
    },
    "cpu8/collectives": {
        "counts": (15, 10, 0, 61, 24),
        "ops": "add all-gather all-reduce all-to-all broadcast collective-permute concatenate constant fusion get-tuple-element multiply reduce-scatter slice",
        "kernels": "collective-permute all-reduce all-gather fusion reduce-scatter fusion fusion fusion fusion fusion fusion fusion fusion all-to-all fusion",
        "collectives": [
            "collective-permute 8192/8192 crosses=False groups=0,1;1,2;2,3;3,4;4,5;5,6;6,7;7,0 | {{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}} | jit(body)/shard_map/ppermute/ppermute",
            "all-reduce 8192/8192 crosses=False groups=0,1,2,3,4,5,6,7 | {{0,1,2,3,4,5,6,7}} | jit(body)/shard_map/psum/psum_invariant",
            "all-gather 65536/8192 crosses=False groups=0,1,2,3,4,5,6,7 | {{0,1,2,3,4,5,6,7}} | jit(body)/shard_map/all_gather/all_gather",
            "reduce-scatter 8192/65536 crosses=False groups=0,1,2,3,4,5,6,7 | {{0,1,2,3,4,5,6,7}} | jit(body)/shard_map/psum_scatter/reduce_scatter",
            "all-to-all 8192/8192 crosses=False groups=0,1,2,3,4,5,6,7 | {{0,1,2,3,4,5,6,7}} | jit(body)/shard_map/all_to_all/all_to_all",
        ],
    },
    "tpu/mlp": {
        "counts": (2, 1, 0, 31, 8),
        "ops": "add bitcast broadcast convert convolution copy-done copy-start fusion tanh",
        "kernels": "copy-start copy-done fusion",
        "collectives": [],
    },
    "tpu/loop": {
        "counts": (8, 1, 0, 40, 13),
        "ops": "add bitcast broadcast compare constant convert convolution copy copy-done copy-start fusion get-tuple-element tanh tuple while",
        "kernels": "copy copy-start convert copy-done while copy-start copy-done",
        "collectives": [],
    },
    "tpu/branch": {
        "counts": (7, 2, 0, 41, 14),
        "ops": "add bitcast broadcast compare conditional constant convert convolution copy-done copy-start cosine fusion get-tuple-element multiply reduce sine tuple",
        "kernels": "copy-start reduce compare convert copy-done conditional copy-start copy-done",
        "collectives": [],
    },
    "tpu/train": {
        "counts": (11, 6, 0, 123, 26),
        "ops": "add bitcast broadcast constant convert convolution copy-done copy-start fusion get-tuple-element multiply reduce subtract tanh tuple",
        "kernels": "copy-start copy-done copy-start fusion copy-done fusion multiply fusion copy-start fusion copy-start copy-done fusion copy-done fusion",
        "collectives": [],
    },
    "tpu/mesh4_mlp": {
        "counts": (7, 2, 0, 50, 15),
        "ops": "add all-reduce bitcast broadcast constant convert convolution copy-done copy-start dynamic-slice fusion multiply partition-id tanh",
        "kernels": "copy-start convert copy-start multiply copy-done fusion copy-done fusion all-reduce",
        "collectives": [
            "all-reduce 2048/2048 crosses=False groups=0,1,2,3 | mesh['axis_0'=4] {'axis_0'} | jit(mlp)/dot_general",
        ],
    },
    "tpu/mesh4_collectives": {
        "counts": (7, 1, 0, 21, 11),
        "ops": "add all-gather all-reduce all-to-all bitcast broadcast collective-permute-done collective-permute-start constant fusion multiply reduce-scatter",
        "kernels": "collective-permute-start collective-permute-done all-reduce all-gather fusion reduce-scatter all-to-all add",
        "collectives": [
            "collective-permute 8192/8192 crosses=False groups=0,1;1,2;2,3;3,0 | {{0,1},{1,2},{2,3},{3,0}} | jit(body)/shard_map/ppermute/ppermute",
            "all-reduce 8192/8192 crosses=False groups=0,1,2,3 | {{0,1,2,3}} | jit(body)/shard_map/psum/psum_invariant",
            "all-gather 32768/8192 crosses=False groups=0,1,2,3 | {{0,1,2,3}} | jit(body)/shard_map/all_gather/all_gather",
            "reduce-scatter 8192/32768 crosses=False groups=0,1,2,3 | {{0,1,2,3}} | jit(body)/shard_map/psum_scatter/reduce_scatter",
            "all-to-all 8192/8192 crosses=False groups=0,1,2,3 | {{0,1,2,3}} | jit(body)/shard_map/all_to_all/all_to_all",
        ],
    },
    "tpu4x4/train": {
        "counts": (16, 9, 0, 138, 33),
        "ops": "add all-reduce bitcast broadcast constant convert convolution copy-done copy-start fusion get-tuple-element multiply reduce subtract tanh tuple",
        "kernels": "copy-start copy-done copy-start fusion copy-done fusion all-reduce fusion fusion fusion fusion copy-start all-reduce multiply copy-start copy-done fusion copy-done fusion fusion",
        "collectives": [
            "all-reduce 1024/1024 crosses=True groups=0,2,4,6,8,10,12,14;1,3,5,7,9,11,13,15 | [2,8]<=[8,2]T(1,0) | jit(train_step)/jvp(loss#1)/mlp#1/dot_general",
            "all-reduce 6212/6212 crosses=False groups=0,1;2,3;4,5;6,7;8,9;10,11;12,13;14,15 | mesh['axis_0'=8,'axis_1'=2] {'axis_1'} | jit(train_step)/jvp(loss#1)/mean/reduce_sum",
        ],
    },
    "gpu-h100/mlp": {
        "counts": (2, 2, 0, 18, 7),
        "ops": "add bitcast broadcast dot fusion tanh",
        "kernels": "fusion fusion",
        "collectives": [],
    },
    "gpu-h100/train": {
        "counts": (9, 9, 0, 83, 15),
        "ops": "add bitcast broadcast constant dot fusion multiply reduce subtract tanh tuple",
        "kernels": "fusion fusion fusion fusion fusion fusion fusion fusion fusion",
        "collectives": [],
    },
    "gpu-h100/mesh8_collectives": {
        "counts": (8, 2, 0, 27, 14),
        "ops": "add all-gather-done all-gather-start all-reduce-done all-reduce-start all-to-all-done all-to-all-start broadcast collective-permute-done collective-permute-start constant copy fusion multiply reduce-scatter-done reduce-scatter-start",
        "kernels": "copy collective-permute-start collective-permute-done all-gather-start all-gather-done all-reduce-start fusion all-reduce-done reduce-scatter-start reduce-scatter-done all-to-all-start all-to-all-done fusion",
        "collectives": [
            "collective-permute 8192/8192 crosses=True groups=0,1;1,2;2,3;3,4;4,5;5,6;6,7;7,0 | {{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}} | jit(body)/shard_map/ppermute",
            "all-gather 65536/8192 crosses=True groups=0,1,2,3,4,5,6,7 | {{0,1,2,3,4,5,6,7}} | jit(body)/shard_map/all_gather",
            "all-reduce 8192/8192 crosses=True groups=0,1,2,3,4,5,6,7 | {{0,1,2,3,4,5,6,7}} | jit(body)/shard_map/psum_invariant",
            "reduce-scatter 65536/65536 crosses=True groups=0,1,2,3,4,5,6,7 | {{0,1,2,3,4,5,6,7}} | jit(body)/shard_map/reduce_scatter",
            "all-to-all 8192/8192 crosses=True groups=0,1,2,3,4,5,6,7 | {{0,1,2,3,4,5,6,7}} | jit(body)/shard_map/all_to_all",
        ],
    },
    "gpu-v100/mlp": {
        "counts": (3, 1, 2, 12, 10),
        "ops": "bitcast custom-call fusion get-tuple-element tanh",
        "kernels": "custom-call fusion custom-call",
        "collectives": [],
    },
    "gpu-v100/train": {
        "counts": (12, 7, 5, 68, 25),
        "ops": "add bitcast broadcast constant custom-call fusion get-tuple-element multiply reduce subtract tanh tuple",
        "kernels": "custom-call fusion custom-call fusion fusion custom-call fusion fusion custom-call fusion custom-call fusion",
        "collectives": [],
    },
    "gpu-v100/mesh8_collectives": {
        "counts": (8, 2, 0, 27, 14),
        "ops": "add all-gather-done all-gather-start all-reduce-done all-reduce-start all-to-all-done all-to-all-start broadcast collective-permute-done collective-permute-start constant copy fusion multiply reduce-scatter-done reduce-scatter-start",
        "kernels": "copy collective-permute-start collective-permute-done all-gather-start all-gather-done fusion reduce-scatter-start reduce-scatter-done all-reduce-start all-reduce-done all-to-all-start all-to-all-done fusion",
        "collectives": [
            "collective-permute 8192/8192 crosses=True groups=0,1;1,2;2,3;3,4;4,5;5,6;6,7;7,0 | {{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}} | jit(body)/shard_map/ppermute",
            "all-gather 65536/8192 crosses=True groups=0,1,2,3,4,5,6,7 | {{0,1,2,3,4,5,6,7}} | jit(body)/shard_map/all_gather",
            "reduce-scatter 65536/65536 crosses=True groups=0,1,2,3,4,5,6,7 | {{0,1,2,3,4,5,6,7}} | jit(body)/shard_map/reduce_scatter",
            "all-reduce 8192/8192 crosses=True groups=0,1,2,3,4,5,6,7 | {{0,1,2,3,4,5,6,7}} | jit(body)/shard_map/psum_invariant",
            "all-to-all 8192/8192 crosses=True groups=0,1,2,3,4,5,6,7 | {{0,1,2,3,4,5,6,7}} | jit(body)/shard_map/all_to_all",
        ],
    },
}
