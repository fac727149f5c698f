"""Files that pass the file, op and chain budgets but bomb XLA: an intermediate whose size
overflows XLA's shape arithmetic (static, or symbolic and only that large at the call's batch),
and op names that XLA copies into the metadata of every compiled operation.

Each file is made here, then loaded, called and differentiated in a supervised child (time,
memory, signals): before the limits, the size bombs aborted the caller (SIGABRT, ``overflow
in static extent product``) and the name bomb drove it past gigabytes in XLA's compile.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nbcompile.errors import FreezeError
from nbcompile.frozen import _jaxcompat, _program, freeze, load

from ..helpers import child_json
from . import _supervise
from ._craft import edit_manifest, program_file, repack
from ._hostile import MODULE, Case, job_file

F32 = np.float32


def _static_bomb() -> bytes:
    """Six ops; one intermediate of 2·2³¹·2³¹·4 f32 elements (reduced away at once)."""
    big = "tensor<2x2147483648x2147483648x4xf32>"
    body = f"""  func.func public @main(%arg0: tensor<4xf32>) -> (tensor<4xf32>) {{
    %0 = stablehlo.broadcast_in_dim %arg0, dims = [3] : (tensor<4xf32>) -> {big}
    %z = stablehlo.constant dense<0.0> : tensor<f32>
    %1 = stablehlo.reduce(%0 init: %z) applies stablehlo.add across dimensions = [0, 1, 2]
      : ({big}, tensor<f32>) -> tensor<4xf32>
    %2 = stablehlo.sine %1 : tensor<4xf32>
    return %2 : tensor<4xf32>
  }}"""
    spec = jax.ShapeDtypeStruct((4,), F32)
    return program_file(MODULE.format(body), [spec], [spec])


def _names_bomb(ops: int, name_bytes: int) -> bytes:
    """About ``ops`` element-wise ops (a shallow tree: every one used, no long chain) that all
    carry one ``name_bytes``-long op name, one location alias in the file: the program
    section stays small."""
    t = "tensor<4xf32> loc(#big)"
    lines = [f"    %s{i} = stablehlo.sine %arg0 : {t}" for i in range(ops // 2 + 1)]
    names, k = [f"%s{i}" for i in range(ops // 2 + 1)], 0
    while len(names) > 1:
        pairs = []
        for a, b in zip(names[::2], names[1::2], strict=False):
            lines.append(f"    %a{k} = stablehlo.add {a}, {b} : {t}")
            pairs.append(f"%a{k}")
            k += 1
        names = pairs + (names[-1:] if len(names) % 2 else [])
    body = (
        "  func.func public @main(%arg0: tensor<4xf32>) -> (tensor<4xf32>) {\n"
        + "\n".join(lines)
        + f"\n    return {names[0]} : tensor<4xf32>\n  }}"
    )
    text = f'#big = loc("{"n" * name_bytes}")\n' + MODULE.format(body)
    spec = jax.ShapeDtypeStruct((4,), F32)
    return program_file(text, [spec], [spec])


def _symbolic_bomb(path: Path, tmp_path: Path) -> None:
    """A program with a symbolic batch b whose intermediate has b·2⁶¹ elements: the probe sees
    only ``?`` dimensions there, and at b = 2 its size overflows XLA's 64-bit arithmetic.
    (JAX lowers shape constants as int32, so the 2⁶¹ is spread over three dimensions.)"""

    def bomb(x: Any) -> tuple[Any]:
        wide = jnp.broadcast_to(x[:, None, None, None], (x.shape[0], 2**30, 2**30, 2))
        return (jnp.sum(wide, axis=(1, 2, 3)),)

    (b,) = jax.export.symbolic_shape("b")
    exported = jax.export.export(jax.jit(bomb), platforms=["cpu"])(jax.ShapeDtypeStruct((b,), F32))
    base = tmp_path / "base.nbc"
    freeze(lambda x: x * 2, np.zeros((2,), F32), path=base, platforms=("cpu",), weights_argnums=())
    ops, targets = _jaxcompat.program_stats(exported)
    data = repack(base.read_bytes(), program=bytes(exported.serialize()))
    path.write_bytes(
        edit_manifest(
            data, lambda m: m.update(program={"stablehlo_ops": ops, "custom_calls": targets})
        )
    )


def _run(tmp_path: Path, cases: list[Case]) -> dict[str, Any]:
    job = job_file(tmp_path, cases)
    return _supervise.run(
        "_hostile_worker.py",
        [c.id for c in cases],
        [str(job)],
        item_seconds=300,
        memory_bytes=3 * 2**30,
    )


def test_static_extent_bomb_refused_at_load(tmp_path: Path) -> None:
    path = tmp_path / "static.nbc"
    path.write_bytes(_static_bomb())
    out = _run(tmp_path, [Case("static", str(path), {"NBC508"})])["static"]
    assert out.get("load") == "NBC508", out
    assert "above the limit" in out["message"] and "2x2147483648x2147483648x4xf32" in out["message"]


def test_symbolic_extent_bomb_refused_at_call(tmp_path: Path) -> None:
    path = tmp_path / "symbolic.nbc"
    _symbolic_bomb(path, tmp_path)
    out = _run(tmp_path, [Case("symbolic", str(path), {"loaded"}, call={"NBC508"})])["symbolic"]
    # the worker calls at b = 2: refused before XLA compiles (it aborted the process before)
    assert out.get("load") == "loaded" and out.get("call") == "NBC508", out
    assert out.get("grad") in ("NBC508", "NBC507"), out


_IN_JIT = """
import json, sys
import jax, numpy as np
from nbcompile.errors import FreezeError
from nbcompile.frozen import load
model = load(sys.argv[1])
(b,) = jax.export.symbolic_shape("b")
out = {"eval_shape": str(jax.eval_shape(model, jax.ShapeDtypeStruct((b,), np.float32)).shape)}
try:  # inside the caller's jit: refused before the caller's compile sees the program
    jax.jit(model)(np.zeros((2,), np.float32))
    out["jit"] = "ran"
except FreezeError as err:
    out.update(jit=err.code, message=str(err))
print(json.dumps(out))
"""


def test_symbolic_extent_bomb_in_callers_jit(tmp_path: Path) -> None:
    path = tmp_path / "symbolic.nbc"
    _symbolic_bomb(path, tmp_path)
    out = child_json(["-c", _IN_JIT, str(path)])  # it aborted the process before
    assert out["jit"] == "NBC508" and "at inputs float32[2]" in out["message"], out
    # nothing to compile at a symbolic batch: the symbolic output shape, no int(b) error
    assert out["eval_shape"] == "(b,)", out


def test_one_huge_op_name_refused_at_load(tmp_path: Path) -> None:
    path = tmp_path / "names.nbc"
    # the attacker's file: 4,502 ops sharing one 1 MB name, about 2 MB on disk
    path.write_bytes(_names_bomb(4_502, 2**20))
    assert path.stat().st_size < 4 * 2**20
    out = _run(tmp_path, [Case("names", str(path), {"NBC508"})])["names"]
    assert out.get("load") == "NBC508", out
    assert "location text" in out["message"], out


def test_total_metadata_refused_at_load(tmp_path: Path) -> None:
    # every name under the per-op limit, together over the total
    ops = _program.MAX_METADATA_BYTES // (_program.MAX_LOCATION_BYTES - 64) + 2
    path = tmp_path / "many_names.nbc"
    path.write_bytes(_names_bomb(ops, _program.MAX_LOCATION_BYTES - 64))
    out = _run(tmp_path, [Case("many", str(path), {"NBC508"})])["many"]
    assert out.get("load") == "NBC508", out
    assert f"more than {_program.MAX_METADATA_BYTES} bytes" in out["message"], out


def test_freeze_refuses_a_program_load_would_refuse(tmp_path: Path) -> None:
    def fn(x: Any) -> Any:
        with jax.named_scope("s" * (_program.MAX_LOCATION_BYTES + 1)):
            return jnp.sin(x)

    with pytest.raises(FreezeError) as info:
        freeze(fn, np.zeros((4,), F32), path=tmp_path / "f.nbc", weights_argnums=())
    assert info.value.code == "NBC506" and "location text" in str(info.value)
    assert not (tmp_path / "f.nbc").exists()


# ---------------------------------------------------------------- views of a symbolic model
@pytest.fixture(scope="module")
def biased(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model with a symbolic batch whose program broadcasts (``dynamic_broadcast_in_dim``)."""
    path = tmp_path_factory.mktemp("biased") / "biased.nbc"

    def fn(w: Any, bias: Any, x: Any) -> tuple[Any]:
        return (jnp.tanh(x @ w + bias[None, :]),)

    w, bias = np.ones((4, 3), F32), np.ones((3,), F32)
    result = freeze(fn, w, bias, np.ones((2, 4), F32), path=path, measure_compiled=False)
    assert result.batch == "symbolic"
    return path


def test_callers_pre_optimisation_hlo_with_a_symbolic_model(biased: Path) -> None:
    model = load(biased)
    x = np.arange(20, dtype=F32).reshape(5, 4)
    caller = jax.jit(lambda x: model(x)[0] * 2)
    # what the %%compile view reads: the caller's HLO before XLA refines any shape (it raised
    # JaxRuntimeError "dynamic_broadcast_in_dim can't be translated" on the embedded program)
    assert caller.lower(x).compiler_ir("hlo") is not None
    want = np.tanh(x @ np.ones((4, 3), F32) + 1) * 2
    np.testing.assert_allclose(caller(x), want, rtol=1e-6)
    np.testing.assert_allclose(model(x)[0] * 2, want, rtol=1e-6)
    with pytest.raises(FreezeError) as info:
        jax.grad(lambda x: model(x)[0].sum())(x)
    assert info.value.code == "NBC507"


def test_eval_shape_at_a_symbolic_batch(biased: Path) -> None:
    model = load(biased)
    (b,) = jax.export.symbolic_shape("b")
    # it raised InconclusiveDimensionOperation from nbcompile's own int(b)
    (out,) = jax.eval_shape(model, jax.ShapeDtypeStruct((b, 4), F32))
    assert out.shape == (b, 3) and out.dtype == F32
    (out,) = jax.eval_shape(model, jax.ShapeDtypeStruct((7, 4), F32))
    assert out.shape == (7, 3)
