"""The file stays about the size of the raw weights: weights are arguments, closed-over arrays are
hoisted; constants mode bakes them in and reports what XLA folded."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from nbcompile.frozen import freeze, load

MB = 1_000_000


def _mlp(params, x):
    return jnp.tanh(x @ params["w1"]) @ params["w2"]


def test_50mb_model_file_is_weights_plus_little(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    params = {
        "w1": rng.standard_normal((2048, 4096), dtype=np.float32),
        "w2": rng.standard_normal((4096, 1024), dtype=np.float32),
    }
    x = rng.standard_normal((2, 2048), dtype=np.float32)
    path = tmp_path / "big.nbc"
    res = freeze(_mlp, params, x, path=path, measure_compiled=False)
    raw = sum(a.nbytes for a in params.values())
    assert raw > 50 * MB
    assert res.weight_bytes == raw and res.n_weights == 2 and res.n_hoisted == 0
    assert res.file_bytes == path.stat().st_size
    assert res.file_bytes <= raw * 1.05 + MB
    assert res.file_bytes >= raw
    got = np.asarray(load(path)(x))
    assert got.tobytes() == np.asarray(jax.jit(_mlp)(params, x)).tobytes()


def test_closed_over_array_is_hoisted(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    table = rng.standard_normal((1024, 1024), dtype=np.float32)  # 4 MB, closed over
    small = rng.standard_normal(8, dtype=np.float32)  # 32 bytes: stays a constant

    @jax.jit
    def project(h):  # nested jit: its constants are hoisted too
        return h @ table

    def model(params, x):
        return project(x @ params["w"]) + jnp.sum(small)

    params = {"w": rng.standard_normal((16, 1024), dtype=np.float32)}
    x = rng.standard_normal((3, 16), dtype=np.float32)
    res = freeze(model, params, x, path=tmp_path / "h.nbc", measure_compiled=False)
    assert res.n_hoisted == 1 and res.hoisted_bytes == table.nbytes
    assert res.weight_bytes == table.nbytes + params["w"].nbytes
    assert res.file_bytes <= res.weight_bytes * 1.05 + 64_000
    loaded = load(tmp_path / "h.nbc")
    assert loaded.weights["const_0"] == (1024, 1024)
    assert np.asarray(loaded(x)).tobytes() == np.asarray(jax.jit(model)(params, x)).tobytes()

    baked = freeze(
        model, params, x, path=tmp_path / "c.nbc", constants=True, measure_compiled=False
    )
    assert baked.n_hoisted == 0 and baked.constants_mode
    assert baked.file_bytes > table.nbytes  # the table is inside the program now


def test_constants_mode_lets_xla_fold_weight_only_work(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    params = {
        "a": rng.standard_normal((64, 32), dtype=np.float32),
        "b": rng.standard_normal((32, 64), dtype=np.float32),
    }
    x = rng.standard_normal((4, 64), dtype=np.float32)

    def model(p, v):
        return jnp.tanh(v @ (p["a"] @ p["b"]) * 0.5)  # p["a"] @ p["b"] needs no input

    args = freeze(model, params, x, path=tmp_path / "w.nbc", reference_ops=40)
    const = freeze(model, params, x, path=tmp_path / "c.nbc", constants=True, reference_ops=40)
    assert not args.constants_mode and const.constants_mode
    assert args.n_weights == 2 and const.n_weights == 2
    assert args.compiled_ops is not None and const.compiled_ops is not None
    assert const.compiled_ops < args.compiled_ops, (const.compiled_ops, args.compiled_ops)
    assert const.ops_removed == 40 - const.program_ops
    report = const.to_json()
    for key in (
        "path",
        "file_bytes",
        "weight_bytes",
        "n_weights",
        "program_ops",
        "constants_mode",
        "platforms",
        "signature",
        "ops_removed",
        "compiled_ops",
    ):
        assert key in report
    assert "constants baked in" in const.text() and "training graph: 40 ops" in const.text()
    assert load(tmp_path / "c.nbc").weights == {}
    np.testing.assert_allclose(
        np.asarray(load(tmp_path / "c.nbc")(x)),
        np.asarray(jax.jit(model)(params, x)),
        rtol=1e-3,
        atol=1e-4,
    )
