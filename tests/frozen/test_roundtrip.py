"""A frozen model gives, in a fresh process and through the CLI, exactly the numbers of the
jit-compiled original on CPU (MLP, conv net, attention block)."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import numpy as np
import pytest

from nbcompile.frozen import freeze, load

from . import _models
from .conftest import run_python

KINDS = ("mlp", "conv", "attention")

_FRESH = """
import json, sys, numpy as np, jax
from nbcompile.frozen import load
for kind, path in json.loads(sys.argv[1]).items():
    model = load(path)
    out = model(np.load(path[:-4] + ".x.npy", allow_pickle=False))
    np.savez(path[:-4] + ".fresh.npz", *[np.asarray(a) for a in jax.tree_util.tree_leaves(out)])
"""


@pytest.fixture(scope="module")
def frozen(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list[np.ndarray]]]:
    folder = tmp_path_factory.mktemp("roundtrip")
    out = {}
    for kind in KINDS:
        fn, params, x = _models.make(kind)
        path = folder / f"{kind}.nbc"
        freeze(fn, params, x, path=path, measure_compiled=False)
        np.save(folder / f"{kind}.x.npy", x, allow_pickle=False)
        reference = [np.asarray(a) for a in jax.tree_util.tree_leaves(jax.jit(fn)(params, x))]
        out[kind] = (path, reference)
    return out


def _same_bits(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert g.tobytes() == w.tobytes(), np.max(np.abs(g - w))


def test_fresh_process_is_bit_exact(frozen) -> None:
    paths = {kind: str(path) for kind, (path, _) in frozen.items()}
    proc = run_python("-c", _FRESH, json.dumps(paths))
    assert proc.returncode == 0, proc.stderr[-3000:]
    for path, reference in frozen.values():
        with np.load(path.with_suffix(".fresh.npz"), allow_pickle=False) as npz:
            _same_bits([npz[f"arr_{i}"] for i in range(len(npz.files))], reference)


@pytest.mark.parametrize("kind", KINDS)
def test_cli_run_gives_the_same_numbers(frozen, kind: str, tmp_path: Path) -> None:
    path, reference = frozen[kind]
    output = tmp_path / ("y.npz" if len(reference) > 1 else "y.npy")
    x = path.with_name(f"{kind}.x.npy")
    proc = run_python(
        "-m", "nbcompile.cli", "run", str(path), "--input", str(x), "--output", str(output)
    )
    assert proc.returncode == 0, proc.stderr
    if len(reference) > 1:
        with np.load(output, allow_pickle=False) as npz:
            got = [npz[f"out{i}"] for i in range(len(reference))]
    else:
        got = [np.load(output, allow_pickle=False)]
    _same_bits(got, reference)


def test_loaded_model_describes_itself(frozen) -> None:
    path, _ = frozen["attention"]
    model = load(path)
    assert set(model.weights) == {f"params['{n}']" for n in ("wq", "wk", "wv", "wo", "scale")}
    assert model.weights["params['wq']"] == (32, 32)
    assert model.signature["inputs"]["leaves"] == [{"shape": ["b", 16, 32], "dtype": "float32"}]
    assert model.signature["outputs"]["tree"]["keys"] == ["attn", "out"]
    assert model.metadata["name"] == "attention"
    assert model.metadata["platforms"] == ["cpu", "cuda", "tpu"]
    assert model.metadata["writer"]["jax"] == jax.__version__
    assert model.platform == "cpu"
    out = model(np.load(path.with_name("attention.x.npy")))
    assert set(out) == {"attn", "out"} and out["attn"].shape == (2, 16, 16)


def test_float64_numpy_inputs_are_canonicalised_like_jax_jit(tmp_path):
    """np.random gives float64; jax.jit (x64 off) runs it as float32 — a frozen model too."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import nbcompile

    def predict(w, x):
        return jnp.tanh(x @ w)

    w = jnp.asarray(np.random.default_rng(0).normal(size=(3, 2)), jnp.float32)
    x64 = np.random.default_rng(1).normal(size=(4, 3))  # float64, as NumPy makes it
    path = tmp_path / "m.nbc"
    nbcompile.freeze(predict, w, jnp.asarray(x64, jnp.float32), path=path)
    got = nbcompile.load(path)(x64)
    np.testing.assert_allclose(np.asarray(got), np.asarray(jax.jit(predict)(w, x64)), rtol=1e-6)
