"""Issue 28 item 8: typed PRNG keys (``jax.random.key``) in frozen models.

``%%compile --freeze`` of a model that takes a typed key used to be refused (``[NBC506] input
... is not an array (PRNGKeyArray)``). A typed key is stored as its key data (uint32) with its
implementation named from a closed list (``prng_impl``), and rebuilt in the program with
``jax.random.wrap_key_data``; the loaded model takes typed keys (or their raw data). The model
is a Flax NNX VAE's sampling step (encoder, reparameterisation with a key, decoder), defined in
an earlier cell as in the Flax VAE example.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nbcompile
from nbcompile.errors import FreezeError
from nbcompile.frozen import _format, _manifest

from ..helpers import run

MODEL_CELL = """
import jax, jax.numpy as jnp
from flax import nnx

class VAE(nnx.Module):
    def __init__(self, rngs):
        self.enc = nnx.Linear(8, 16, rngs=rngs)
        self.mu = nnx.Linear(16, 4, rngs=rngs)
        self.logvar = nnx.Linear(16, 4, rngs=rngs)
        self.dec = nnx.Linear(4, 8, rngs=rngs)

    def __call__(self, x, key):
        h = nnx.relu(self.enc(x))
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + jnp.exp(0.5 * logvar) * jax.random.normal(key, mu.shape)
        return self.dec(z)

vae = VAE(nnx.Rngs(0))
x = jax.random.normal(jax.random.key(3), (4, 8))
key = jax.random.key(1)
"""


def sample(params, x, key):
    h = jnp.tanh(x @ params["w"])
    mu, logvar = jnp.split(h @ params["head"], 2, axis=-1)
    return mu + jnp.exp(0.5 * logvar) * jax.random.normal(key, mu.shape)


@pytest.fixture(scope="module")
def params():
    ks = jax.random.split(jax.random.key(7), 2)
    return {"w": jax.random.normal(ks[0], (8, 16)), "head": jax.random.normal(ks[1], (16, 8))}


def test_freeze_magic_with_a_typed_key_writes_a_model_that_takes_keys(shell, tmp_path):
    shell.reset(new_session=False)
    assert shell.run_cell(MODEL_CELL).success
    path = tmp_path / "vae.nbc"
    res = run(shell, f"%%compile -q --freeze {path}\nvae(x, key)\n")
    assert res.success, res.error_in_exec
    model = nbcompile.load(path)
    (spec,) = [leaf for leaf in model.signature["inputs"]["leaves"] if "prng_impl" in leaf]
    assert spec == {"shape": [2], "dtype": "uint32", "prng_impl": "threefry2x32"}
    vae, x = shell.user_ns["vae"], shell.user_ns["x"]
    other = jax.random.key(42)  # a key the model was not frozen with: it is an input
    np.testing.assert_allclose(np.asarray(model(x, other)), np.asarray(vae(x, other)), rtol=1e-5)
    # the raw key data (or a legacy jax.random.PRNGKey) is the same key
    np.testing.assert_allclose(
        np.asarray(model(x, jax.random.key_data(other))), np.asarray(vae(x, other)), rtol=1e-5
    )
    with pytest.raises(FreezeError) as err:
        model(x, jax.random.key(0, impl="rbg"))
    assert err.value.code == "NBC507" and "threefry2x32" in str(err.value)


def test_a_key_among_the_weights_and_a_batch_of_keys(params, tmp_path):
    x = jax.random.normal(jax.random.key(3), (4, 8))
    key = jax.random.key(5, impl="rbg")
    nbcompile.freeze(
        sample, params, x, key, path=tmp_path / "w.nbc", weights_argnums=(0, 2), platforms=("cpu",)
    )
    model = nbcompile.load(tmp_path / "w.nbc")
    assert model.weights["key"] == (4,)  # rbg key data: 4 uint32
    np.testing.assert_allclose(np.asarray(model(x)), np.asarray(sample(params, x, key)), rtol=1e-5)

    def per_row(params, x, keys):  # one key per example (DP-SGD noise, dropout per row)
        return jax.vmap(lambda xi, ki: sample(params, xi[None], ki)[0])(x, keys)

    result = nbcompile.freeze(
        per_row,
        params,
        x,
        jax.random.split(jax.random.key(0), 4),
        path=tmp_path / "b.nbc",
        weights_argnums=0,
        platforms=("cpu",),
    )
    # the keys share the batch dimension with x: the file serves any batch size
    assert result.batch == "symbolic"
    assert result.signature["inputs"]["leaves"][1]["shape"] == ["b", 2]
    model = nbcompile.load(tmp_path / "b.nbc")
    x8, keys8 = jnp.ones((8, 8)), jax.random.split(jax.random.key(9), 8)
    np.testing.assert_allclose(
        np.asarray(model(x8, keys8)), np.asarray(per_row(params, x8, keys8)), rtol=1e-5
    )


def test_a_single_key_is_never_taken_for_the_batch(params, tmp_path):
    """Key data of shape (2,) beside a batch of 2 examples stays one key."""
    x = jnp.ones((2, 8))
    result = nbcompile.freeze(
        sample,
        params,
        x,
        jax.random.key(0),
        path=tmp_path / "s.nbc",
        weights_argnums=0,
        platforms=("cpu",),
    )
    assert result.signature["inputs"]["leaves"][1]["shape"] == [2]


def test_a_key_returned_by_the_model_is_refused_with_the_fix(params, tmp_path):
    def split_and_sample(params, x, key):
        key, sub = jax.random.split(key)
        return sample(params, x, sub), key

    with pytest.raises(FreezeError) as err:
        nbcompile.freeze(
            split_and_sample,
            params,
            jnp.ones((4, 8)),
            jax.random.key(0),
            path=tmp_path / "o.nbc",
            weights_argnums=0,
        )
    assert err.value.code == "NBC506" and "typed PRNG key" in str(err.value)
    assert "key_data" in (err.value.hint or "")
    assert not (tmp_path / "o.nbc").exists()


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"prng_impl": "my_module.Impl"}, "prng_impl"),
        ({"prng_impl": "threefry2x32", "dtype": "float32"}, "uint32"),
        ({"prng_impl": "rbg"}, "trailing dims"),
    ],
)
def test_the_manifest_names_only_listed_implementations(params, tmp_path, change, words):
    nbcompile.freeze(
        sample,
        params,
        jnp.ones((4, 8)),
        jax.random.key(0),
        path=tmp_path / "k.nbc",
        weights_argnums=0,
        platforms=("cpu",),
    )
    raw = _format.unpack_unchecked((tmp_path / "k.nbc").read_bytes())[0]
    manifest = json.loads(raw)
    assert _manifest.parse(_manifest.encode(manifest), _format.FORMAT_VERSION) == manifest
    manifest["inputs"]["leaves"][1].update(change)
    with pytest.raises(FreezeError) as err:
        _manifest.parse(_manifest.encode(manifest), _format.FORMAT_VERSION)
    assert err.value.code == "NBC500" and words in str(err.value)
    # outputs never carry a key
    manifest = json.loads(raw)
    manifest["outputs"]["leaves"][0]["prng_impl"] = "threefry2x32"
    with pytest.raises(FreezeError):
        _manifest.parse(_manifest.encode(manifest), _format.FORMAT_VERSION)
