"""A compilation measured after training reads the model's weights as they are now.

Keras' ``model.fit`` and a Flax NNX optimizer step replace the weight arrays the model holds and,
where their step donates its inputs, delete the old ones: ``run_profile``, ``freeze`` (and the
other measurements) on the earlier compilation read the model's variables again, as a re-run of
the cell does, and the frozen file holds the trained weights. Arrays no model holds (a plain
``params`` argument donated to a jitted step) cannot be read again: NBC212 names them and the fix.
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "jax")  # before keras is first imported

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nbcompile
from nbcompile.errors import NbcompileError

pytestmark = pytest.mark.usefixtures("relaxed_dtypes")


def _load(path):
    from nbcompile.frozen import load

    return load(path)


def _deleted(tree) -> bool:
    return any(isinstance(x, jax.Array) and x.is_deleted() for x in jax.tree_util.tree_leaves(tree))


def _keras_model_after_fit():
    keras = pytest.importorskip("keras", reason="keras (nbcompile[keras]) is not installed")
    if keras.backend.backend() != "jax":
        pytest.skip("keras was imported with a non-JAX backend")
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8,), name="features")
    hidden = keras.layers.Dense(16, activation="relu", name="hidden")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(3, name="logits")(hidden), name="mlp")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 8)).astype("float32")
    y = rng.normal(size=(32, 3)).astype("float32")
    c = nbcompile.compile(model, x)
    before = np.asarray(model(x))
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
    model.fit(x, y, epochs=1, batch_size=32, verbose=0)
    # what the earlier compilation was given is gone: Keras' train step donated it
    assert _deleted(c.args[0])
    after = np.asarray(model(x))
    assert not np.allclose(before, after)  # training changed what the model computes
    return c, x, after


def test_keras_profile_after_fit_reads_the_trained_weights():
    c, _, _ = _keras_model_after_fit()
    profile = c.run_profile(calls=2)
    assert profile.step_seconds > 0 and profile.kernels
    assert not _deleted(c.args)


def test_keras_freeze_after_fit_stores_the_trained_weights(tmp_path):
    c, x, after = _keras_model_after_fit()
    frozen = c.freeze(str(tmp_path / "mlp.nbc"))
    assert frozen is not None
    np.testing.assert_allclose(np.asarray(_load(tmp_path / "mlp.nbc")(x)), after, rtol=1e-5)
    bench = c.run_bench()
    assert bench.compiled.median > 0


def _nnx_model_after_a_donating_update():
    nnx = pytest.importorskip("flax.nnx")
    optax = pytest.importorskip("optax")

    class MLP(nnx.Module):
        def __init__(self, rngs):
            self.hidden = nnx.Linear(8, 16, rngs=rngs)
            self.out = nnx.Linear(16, 3, rngs=rngs)

        def __call__(self, x):
            return self.out(nnx.relu(self.hidden(x)))

    model = MLP(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(0.05), wrt=nnx.Param)
    x = jnp.asarray(np.random.default_rng(0).normal(size=(32, 8)), jnp.float32)
    y = jnp.ones((32, 3), jnp.float32)
    c = nbcompile.compile(model, x)
    before = np.asarray(model(x))

    @nnx.jit(donate_argnums=(0, 1))
    def step(model, optimizer, x, y):
        grads = nnx.grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
        optimizer.update(model, grads)

    step(model, optimizer, x, y)
    after = np.asarray(model(x))
    assert not np.allclose(before, after)
    return c, x, after


def test_nnx_profile_after_an_optimizer_update():
    c, _, _ = _nnx_model_after_a_donating_update()
    assert c.run_profile(calls=2).kernels


def test_nnx_freeze_and_debug_after_an_optimizer_update(tmp_path):
    c, x, after = _nnx_model_after_a_donating_update()
    c.freeze(str(tmp_path / "mlp.nbc"))
    np.testing.assert_allclose(np.asarray(_load(tmp_path / "mlp.nbc")(x)), after, rtol=1e-5)
    assert not c.run_debug().stopped


def _predict(params, x):
    return jnp.tanh(x @ params["w"])


def _donated_params():
    params = {"w": jnp.ones((8, 4), jnp.float32)}
    x = jnp.ones((2, 8), jnp.float32)
    c = nbcompile.compile(_predict, params, x)
    # a training step that consumes the user's params (its output reuses their buffers)
    jax.jit(lambda p: jax.tree.map(lambda w: w * 0.5, p), donate_argnums=0)(params)
    assert _deleted(params)
    return c


@pytest.mark.parametrize("what", ["run_profile", "freeze", "run_bench", "run_debug"])
def test_profile_and_freeze_of_deleted_plain_arguments_name_them_and_the_fix(tmp_path, what):
    c = _donated_params()
    run = {
        "run_profile": lambda: c.run_profile(calls=2),
        "freeze": lambda: c.freeze(str(tmp_path / "p.nbc")),
        "run_bench": c.run_bench,
        "run_debug": c.run_debug,
    }[what]
    with pytest.raises(NbcompileError) as caught:
        run()
    err = caught.value
    assert err.code == "NBC212"
    assert "params['w']" in err.message and "deleted" in err.message
    assert "run the %%compile cell again" in err.hint
