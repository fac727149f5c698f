"""A cache hit never gives an answer a fresh compile of the live objects would not.

For plain functions, Flax NNX, Flax Linen, Equinox and Keras models: define the model in one
cell, compile it from another, change ONE thing between runs (a mode flag, a static field, a
closed-over scalar, a global array, the weights, Keras ``predict``) and re-run the unchanged
``%%compile`` cell. Each time the compiled program's outputs on its live arguments equal the
live objects' own eager outputs; changes that only touch inputs (weights) reuse the program,
changes to what the traced code reads compile again. Re-running a ``--freeze`` cell after a
weight change writes the new weights: every file is loaded in one fresh process at the end.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from .helpers import run_child

os.environ.setdefault("KERAS_BACKEND", "jax")

pytestmark = pytest.mark.usefixtures("relaxed_dtypes")


# Each scenario: (setup cell, compile call, reference expression, [(change cell, hit?)]).
SCENARIOS = {
    "function": (
        """
import jax, jax.numpy as jnp, numpy as np, types
x = jnp.asarray(np.random.default_rng(1).normal(size=(2, 4)), jnp.float32)
W = jnp.asarray(np.random.default_rng(0).normal(size=(4, 4)), jnp.float32)
Wn = np.ones((4, 4), np.float32)
SCALE = 2.0
cfg = types.SimpleNamespace(shift=0.5)
def f(x):
    return jnp.tanh(x @ W + x @ Wn) * SCALE + cfg.shift
""",
        "f(x)",
        "f(x)",
        [
            ("SCALE = 3.0", False),  # closed-over Python scalar
            ("W = W * 2", False),  # a global array (a constant in the program)
            ("Wn[0, 0] = 7.0", False),  # a NumPy global changed in place
            ("cfg.shift = -1.0", False),  # an attribute of a config object
            ("y = 1", True),  # nothing the function reads
        ],
    ),
    "flax-nnx": (
        """
import jax, jax.numpy as jnp, numpy as np
from flax import nnx
class Net(nnx.Module):
    def __init__(self, rngs):
        self.lin = nnx.Linear(4, 4, rngs=rngs)
        self.drop = nnx.Dropout(0.5, rngs=rngs)
        self.scale = 2.0
    def __call__(self, x):
        return self.drop(jnp.tanh(self.lin(x))) * self.scale
model = Net(nnx.Rngs(0))
x = jnp.asarray(np.random.default_rng(1).normal(size=(2, 4)), jnp.float32)
""",
        "model(x)",
        "model(x)",
        [
            ("model.eval()", False),  # a mode flag
            ("model.lin.kernel[...] = model.lin.kernel[...] * 2", True),  # new weights
            ("model.scale = 3.0", False),  # a static field
        ],
    ),
    "flax-linen": (
        """
import jax, jax.numpy as jnp, numpy as np
import flax.linen as nn
class Net(nn.Module):
    scale: float = 2.0
    @nn.compact
    def __call__(self, x, deterministic):
        h = nn.Dropout(0.5, deterministic=deterministic)(jnp.tanh(nn.Dense(4)(x)))
        return h * self.scale
model = Net()
x = jnp.asarray(np.random.default_rng(1).normal(size=(2, 4)), jnp.float32)
variables = model.init(jax.random.key(0), x, deterministic=True)
DET = True
""",
        "model.apply(variables, x, deterministic=DET)",
        "model.apply(variables, x, deterministic=True)",
        [
            ("variables = jax.tree.map(lambda v: v * 2, variables)", True),  # new weights
            ("model = Net(scale=3.0)", False),  # a field
        ],
    ),
    "equinox": (
        """
import jax, jax.numpy as jnp, numpy as np, equinox as eqx
class Net(eqx.Module):
    lin: eqx.nn.Linear
    drop: eqx.nn.Dropout
    def __init__(self, key):
        self.lin = eqx.nn.Linear(4, 4, key=key)
        self.drop = eqx.nn.Dropout(0.5)
    def __call__(self, x, key=None):
        return self.drop(jnp.tanh(jax.vmap(self.lin)(x)), key=key)
model = Net(jax.random.key(0))
x = jnp.asarray(np.random.default_rng(1).normal(size=(2, 4)), jnp.float32)
key = jax.random.key(1)
""",
        "model(x, key=key)",
        "model(x, key=key)",
        [
            ("model = eqx.nn.inference_mode(model)", False),  # a mode flag
            (
                "model = eqx.tree_at(lambda m: m.lin.weight, model, model.lin.weight * 2)",
                True,
            ),  # new weights
        ],
    ),
    "keras": (
        """
import os
os.environ["KERAS_BACKEND"] = "jax"
import jax, jax.numpy as jnp, numpy as np, keras
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4, activation="tanh"),
                          keras.layers.Dropout(0.5)])
x = np.random.default_rng(1).normal(size=(2, 4)).astype("float32")
TRAIN = True
""",
        "model(x, training=TRAIN)",
        "model(x, training=False)",
        [
            ("TRAIN = False", False),  # a mode flag
            ("_ = model.predict(x, verbose=0)", True),  # Keras replaces the variables' buffers
            ("model.layers[0].kernel.assign(model.layers[0].kernel * 2)", True),  # weights
        ],
    ),
}


@pytest.fixture
def ip(shell):
    shell.reset(new_session=False)
    return shell


def _outputs(ip, c):
    import jax

    return np.asarray(jax.device_get(c.fn(*c.args, **c.kwargs)))


def _reference(ip, expr):
    res = ip.run_cell(f"_reference = np.asarray({expr})")
    assert res.success, res.error_in_exec
    return ip.user_ns["_reference"]


@pytest.mark.parametrize("library", list(SCENARIOS))
def test_rerun_after_a_change_equals_the_live_objects(ip, library, tmp_path):
    import nbcompile

    setup, call, reference, changes = SCENARIOS[library]
    assert ip.run_cell(setup).success
    cell = f"%%compile -q\n{call}\n"
    assert ip.run_cell(cell).success, ip.run_cell(cell).error_in_exec
    for change, hit in changes:
        assert ip.run_cell(change).success, change
        res = ip.run_cell(cell)
        assert res.success, (change, res.error_in_exec)
        c = nbcompile.last()
        assert c.cache_hit is hit, f"{library}: after `{change}` cache_hit={c.cache_hit}"
        want = _reference(ip, reference)
        np.testing.assert_allclose(
            _outputs(ip, c),
            want,
            rtol=1e-5,
            atol=1e-6,
            err_msg=f"{library}: stale after `{change}`",
        )


# library -> (cells that make the model deterministic, the cell that changes its weights,
#             the inference call to freeze)
FREEZE = {
    "function": ([], "W = W * 3", "f(x)"),
    "flax-nnx": (["model.eval()"], "model.lin.kernel[...] = model.lin.kernel[...] * 2", "model(x)"),
    "flax-linen": (
        [],
        "variables = jax.tree.map(lambda v: v * 2, variables)",
        "model.apply(variables, x, deterministic=True)",
    ),
    "equinox": (
        ["model = eqx.nn.inference_mode(model)"],
        "model = eqx.tree_at(lambda m: m.lin.weight, model, model.lin.weight * 2)",
        "model(x)",
    ),
    "keras": (
        ["TRAIN = False"],
        "model.layers[0].kernel.assign(model.layers[0].kernel * 2)",
        "model(x, training=TRAIN)",
    ),
}


def test_freeze_rerun_after_new_weights_writes_the_new_weights(ip, tmp_path):
    """Every library: compile with --freeze, change the weights, re-run the same cell: the file,
    loaded in a fresh process, gives the live outputs (not the cached compile's)."""
    import nbcompile

    cases = []
    for library, (setup, _call, reference, _changes) in SCENARIOS.items():
        prepare, weights, call = FREEZE[library]
        ip.reset(new_session=False)
        for cell_text in (setup, *prepare):
            assert ip.run_cell(cell_text).success
        path = tmp_path / f"{library}.nbc"
        cell = f"%%compile -q --freeze {path}\n{call}\n"
        assert ip.run_cell(cell).success
        assert ip.run_cell(weights).success
        res = ip.run_cell(cell)
        assert res.success, res.error_in_exec
        c = nbcompile.last()
        inputs = [np.asarray(a) for i, a in enumerate(c.args) if i not in c.adapted.weights_argnums]
        want = _reference(ip, reference)
        np.testing.assert_allclose(_outputs(ip, c), want, rtol=1e-5, atol=1e-6)
        np.save(tmp_path / f"{library}-want.npy", want)
        for j, arr in enumerate(inputs):
            np.save(tmp_path / f"{library}-in{j}.npy", arr)
        cases.append(
            {
                "path": str(path),
                "inputs": len(inputs),
                "want": str(tmp_path / f"{library}-want.npy"),
                "prefix": str(tmp_path / library),
            }
        )
    child = (
        "import json, sys, numpy as np, nbcompile\n"
        "for case in json.loads(sys.argv[1]):\n"
        "    model = nbcompile.load(case['path'])\n"
        "    ins = [np.load(f\"{case['prefix']}-in{j}.npy\") for j in range(case['inputs'])]\n"
        "    got = np.asarray(model(*ins))\n"
        "    np.testing.assert_allclose(got, np.load(case['want']), rtol=1e-5, atol=1e-6,\n"
        "                               err_msg=case['path'])\n"
        "print('ok', len(json.loads(sys.argv[1])))\n"
    )
    proc = run_child(["-c", child, json.dumps(cases)])
    assert proc.stdout.strip() == f"ok {len(SCENARIOS)}"


def test_the_cache_key_never_runs_the_users_objects(ip):
    """Fingerprinting what traced code reads must not execute it: Keras keeps lazy modules
    (importing on attribute access) on classes the walk reaches; one raised
    ModuleNotFoundError('_gdbm') through %%compile in a full test session."""
    setup = """
import jax.numpy as jnp
class Lazy:
    def __getattr__(self, name):
        raise ModuleNotFoundError("No module named '_gdbm' (imported on attribute access)")
class Holder:
    lazy = Lazy()
    __slots__ = ("value",)
    def __init__(self):
        self.value = 2.0
holder, lazy = Holder(), Lazy()
def f(x):
    return x * holder.value if lazy is not None else x
x = jnp.ones(3)
"""
    assert ip.run_cell(setup).success
    res = ip.run_cell("%%compile -q\nf(x)\n")
    assert res.success, res.error_in_exec
    assert ip.run_cell("holder.value = 3.0").success  # a slot the traced code reads
    assert ip.run_cell("%%compile -q\nf(x)\n").success
    import nbcompile

    c = nbcompile.last()
    assert not c.cache_hit and float(c.fn(*c.args)[0]) == 3.0
