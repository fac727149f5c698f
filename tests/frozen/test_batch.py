"""Symbolic batch dimension: a model frozen at one batch size serves any batch size."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nbcompile.cli import main
from nbcompile.errors import FreezeError
from nbcompile.frozen import freeze, load, verify
from nbcompile.frozen._load import load_bytes

from . import _models
from ._craft import edit_manifest
from .conftest import run_python

_FRESH = """
import sys, numpy as np
from nbcompile.frozen import load
model = load(sys.argv[1])
for n in sys.argv[3:]:
    x = np.load(sys.argv[2] + n + ".npy", allow_pickle=False)
    np.save(sys.argv[2] + n + ".out.npy", np.asarray(model(x)), allow_pickle=False)
"""


def _mlp(seed: int = 0, batch: int = 256):
    fn, params, _ = _models.make("mlp", seed)
    x = np.random.default_rng(seed + 1).standard_normal((batch, 32)).astype(np.float32)
    return fn, params, x


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes(), np.max(np.abs(got - want))


@pytest.fixture(scope="module")
def mlp256(tmp_path_factory: pytest.TempPathFactory):
    fn, params, x = _mlp()
    path = tmp_path_factory.mktemp("batch") / "mlp256.nbc"
    result = freeze(fn, params, x, path=path)
    return path, result, fn, params, x


def test_batch_256_serves_5_and_1_in_a_fresh_process(mlp256, tmp_path: Path) -> None:
    path, result, fn, params, x = mlp256
    assert result.batch == "symbolic"
    assert result.to_json()["batch"] == "symbolic" and "batch: symbolic" in result.text()
    assert result.signature["inputs"]["leaves"] == [{"shape": ["b", 32], "dtype": "float32"}]
    assert result.signature["outputs"]["leaves"] == [{"shape": ["b", 10], "dtype": "float32"}]
    sizes = ("5", "1")
    for n in sizes:
        np.save(tmp_path / f"x{n}.npy", x[: int(n)] * 0.5, allow_pickle=False)
    proc = run_python("-c", _FRESH, str(path), str(tmp_path / "x"), *sizes)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for n in sizes:
        small = x[: int(n)] * 0.5
        want = np.asarray(jax.jit(fn)(params, small))
        _same_bits(np.load(tmp_path / f"x{n}.out.npy"), want)
        assert want.shape == (int(n), 10)


def test_cli_run_on_another_batch_size_and_inspect(mlp256, tmp_path: Path, capsys) -> None:
    path, _, fn, params, x = mlp256
    small = x[:7]
    np.save(tmp_path / "x7.npy", small, allow_pickle=False)
    proc = run_python(
        "-m",
        "nbcompile.cli",
        "run",
        str(path),
        "--input",
        str(tmp_path / "x7.npy"),
        "--output",
        str(tmp_path / "y.npy"),
    )
    assert proc.returncode == 0, proc.stderr
    _same_bits(np.load(tmp_path / "y.npy"), np.asarray(jax.jit(fn)(params, small)))
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "inputs: [0] float32[b, 32]" in out and "(value) float32[b, 10]" in out, out
    assert "verification: ok" in out


def test_verify_makes_batch_2_inputs_and_takes_given_ones(mlp256) -> None:
    path = mlp256[0]
    report = verify(path)
    assert report["ok"], report
    assert report["outputs"] == [{"shape": [2, 10], "dtype": "float32", "finite": True}]
    given = verify(path, inputs=[np.ones((3, 32), np.float32)])
    assert given["ok"] and given["outputs"][0]["shape"] == [3, 10], given


def test_inconsistent_batch_sizes_are_refused(tmp_path: Path) -> None:
    w = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    path = tmp_path / "two.nbc"
    result = freeze(
        lambda p, a, c: a @ p + c,
        w,
        np.ones((4, 3), np.float32),
        np.ones((4, 5), np.float32),
        weights_argnums=0,
        path=path,
        measure_compiled=False,
    )
    assert result.batch == "symbolic"
    assert [leaf["shape"] for leaf in result.signature["inputs"]["leaves"]] == [["b", 3], ["b", 5]]
    model = load(path)
    got = np.asarray(model(np.ones((2, 3), np.float32), np.ones((2, 5), np.float32)))
    np.testing.assert_array_equal(got, np.ones((2, 3), np.float32) @ w + 1)
    with pytest.raises(FreezeError) as info:
        model(np.ones((2, 3), np.float32), np.ones((6, 5), np.float32))
    assert info.value.code == "NBC507"
    assert "b=6" in str(info.value) and "b=2" in str(info.value)
    with pytest.raises(FreezeError) as info:
        model(np.ones((0, 3), np.float32), np.ones((0, 5), np.float32))
    assert info.value.code == "NBC507"


def test_only_leaves_with_the_first_leading_dim_get_b(tmp_path: Path) -> None:
    result = freeze(
        lambda p, a, t: (a @ p) * t.sum(),
        np.ones((3, 2), np.float32),
        np.ones((4, 3), np.float32),
        np.ones((6,), np.float32),
        weights_argnums=0,
        path=tmp_path / "m.nbc",
        measure_compiled=False,
    )
    assert [leaf["shape"] for leaf in result.signature["inputs"]["leaves"]] == [["b", 3], [6]]
    model = load(tmp_path / "m.nbc")
    assert np.asarray(model(np.ones((9, 3), np.float32), np.ones(6, np.float32))).shape == (9, 2)
    with pytest.raises(FreezeError) as info:
        model(np.ones((9, 3), np.float32), np.ones(7, np.float32))
    assert info.value.code == "NBC507"


def _uses_concrete_batch(params, x):
    flat = x.reshape(256 * 32)  # the example's batch size, baked into the code
    return _models.mlp(params, flat.reshape(256, 32))


def test_model_using_the_concrete_batch_falls_back_to_static(tmp_path: Path) -> None:
    fn, params, x = _mlp()
    result = freeze(_uses_concrete_batch, params, x, path=tmp_path / "s.nbc")
    assert result.batch == "static"
    assert result.to_json()["batch"] == "static" and "batch: static" in result.text()
    assert result.signature["inputs"]["leaves"] == [{"shape": [256, 32], "dtype": "float32"}]
    model = load(tmp_path / "s.nbc")
    _same_bits(np.asarray(model(x)), np.asarray(jax.jit(fn)(params, x)))
    with pytest.raises(FreezeError) as info:
        model(x[:5])
    assert info.value.code == "NBC507"


def test_branching_on_the_batch_size_falls_back_to_static(tmp_path: Path) -> None:
    def branchy(w, x):
        return x @ w if x.shape[0] > 100 else x

    w = np.ones((3, 3), np.float32)
    result = freeze(branchy, w, np.ones((256, 3), np.float32), path=tmp_path / "b.nbc")
    assert result.batch == "static"


def test_batch_static_keeps_exact_shapes(tmp_path: Path) -> None:
    fn, params, x = _mlp(batch=4)
    result = freeze(fn, params, x, path=tmp_path / "st.nbc", batch="static")
    assert result.batch == "static"
    model = load(tmp_path / "st.nbc")
    assert model.signature["inputs"]["leaves"] == [{"shape": [4, 32], "dtype": "float32"}]
    _same_bits(np.asarray(model(x)), np.asarray(jax.jit(fn)(params, x)))
    with pytest.raises(FreezeError) as info:
        model(x[:1])
    assert info.value.code == "NBC507"
    with pytest.raises(FreezeError) as info:
        freeze(fn, params, x, path=tmp_path / "bad.nbc", batch="dynamic")
    assert info.value.code == "NBC506"


def test_constants_mode_with_symbolic_batch(tmp_path: Path) -> None:
    fn, params, x = _mlp(batch=64)
    result = freeze(fn, params, x, path=tmp_path / "c.nbc", constants=True)
    assert result.batch == "symbolic" and result.constants_mode
    model = load(tmp_path / "c.nbc")
    assert model.weights == {}
    for n in (1, 5):
        _same_bits(np.asarray(model(x[:n])), np.asarray(jax.jit(fn)(params, x[:n])))


def test_hoisted_constants_with_symbolic_batch(tmp_path: Path) -> None:
    table = np.random.default_rng(3).standard_normal((32, 32)).astype(np.float32)
    fn, params, x = _mlp(batch=16)

    def with_table(p, v):
        return fn(p, jnp.tanh(v @ table))

    result = freeze(with_table, params, x, path=tmp_path / "h.nbc")
    assert result.batch == "symbolic" and result.n_hoisted == 1
    got = np.asarray(load(tmp_path / "h.nbc")(x[:3]))
    _same_bits(got, np.asarray(jax.jit(with_table)(params, x[:3])))


# ---------------------------------------------------------------- manifest strictness
def _manifest_edit(path: Path, edit) -> bytes:
    return edit_manifest(path.read_bytes(), edit)


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m["weights"][0]["shape"].__setitem__(0, "b"),  # b in a weight shape
        lambda m: m["inputs"]["leaves"][0]["shape"].__setitem__(1, "b"),  # not leading
        lambda m: m["inputs"]["leaves"][0]["shape"].__setitem__(0, "B"),  # another name
        lambda m: m["inputs"]["leaves"][0]["shape"].__setitem__(0, 256),  # b only in outputs
        lambda m: m["outputs"]["leaves"][0]["shape"].__setitem__(1, "c"),
    ],
)
def test_manifest_accepts_b_only_in_signatures(mlp256, edit) -> None:
    data = _manifest_edit(mlp256[0], edit)
    with pytest.raises(FreezeError) as info:
        load_bytes(data)
    assert info.value.code == "NBC500", info.value


def test_manifest_b_must_match_the_program(mlp256, tmp_path: Path) -> None:
    path = mlp256[0]
    # A static manifest over a symbolic program (and the reverse) is refused.
    both = _manifest_edit(
        path,
        lambda m: (
            m["inputs"]["leaves"][0]["shape"].__setitem__(0, 256),
            m["outputs"]["leaves"][0]["shape"].__setitem__(0, 256),
        ),
    )
    with pytest.raises(FreezeError) as info:
        load_bytes(both)
    assert info.value.code == "NBC504"
    fn, params, x = _mlp(batch=4)
    static = tmp_path / "static.nbc"
    freeze(fn, params, x, path=static, batch="static", measure_compiled=False)
    faked = _manifest_edit(
        static,
        lambda m: (
            m["inputs"]["leaves"][0]["shape"].__setitem__(0, "b"),
            m["outputs"]["leaves"][0]["shape"].__setitem__(0, "b"),
        ),
    )
    with pytest.raises(FreezeError) as info:
        load_bytes(faked)
    assert info.value.code == "NBC504"
