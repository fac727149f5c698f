"""The libraries' documented patterns (issue 14 §3) work through ``%%compile``, or fail in the
user's own words: NNX losses taking ``nnx.Rngs``, ``--static`` with functions taking a model and
Equinox's partition pattern, ``filter_jit`` steps returning a model, ``jax.vmap(model)``, and
module paths."""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest

from nbcompile.errors import NbcompileError

from ._helpers import assert_close, compile_cell, evaluate, outputs

pytestmark = pytest.mark.usefixtures("relaxed_dtypes")

NNX_MODEL = """
import jax, jax.numpy as jnp, optax
from flax import nnx

class MLP(nnx.Module):
    def __init__(self, rngs):
        self.hidden = nnx.Linear(3, 16, rngs=rngs)
        self.norm = nnx.BatchNorm(16, rngs=rngs)
        self.drop = nnx.Dropout(0.5)
        self.out = nnx.Linear(16, 4, rngs=rngs)

    def __call__(self, x, rngs=None):
        h = self.drop(nnx.relu(self.norm(self.hidden(x))), rngs=rngs)
        return self.out(h)

model = MLP(nnx.Rngs(0))
x = jax.random.normal(jax.random.key(1), (8, 3))
y = jnp.arange(8) % 4
"""

# Flax's MNIST example signature before the tutorial's rewrite: loss_fn(model, rngs, batch)
NNX_LOSS = """
def loss_fn(model, rngs, x, y):
    logits = model(x, rngs=rngs)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
"""

EQX_MODEL = """
import jax, jax.numpy as jnp, equinox as eqx
model = eqx.nn.MLP(3, 2, 8, 2, key=jax.random.key(0))
x = jax.random.normal(jax.random.key(1), (4, 3))
y = jnp.ones((4, 2))
"""

# Equinox's partition/combine pattern (as its MNIST example uses it to jit a loss by hand), with
# eqx.nn.MLP, whose activation functions are leaves of the static partition
EQX_PARTITION = """
params, static = eqx.partition(model, eqx.is_array)

def loss(params, static, x, y):
    model = eqx.combine(params, static)
    return jnp.mean((jax.vmap(model)(x) - y) ** 2)
"""


@pytest.fixture
def ip(shell):
    shell.reset(new_session=False)
    return shell


def run(ip, *cells: str) -> None:
    for text in cells:
        res = ip.run_cell(text)
        assert res.success, res.error_in_exec


def failure(ip, cell: str) -> NbcompileError:
    res = ip.run_cell(cell)
    assert not res.success, f"expected {cell!r} to fail"
    assert isinstance(res.error_in_exec, NbcompileError), repr(res.error_in_exec)
    return res.error_in_exec


def words(err: BaseException) -> str:
    """Everything the user is shown: our message and hint, and JAX's message."""
    return f"{err}\n{err.__cause__}"


def internal_names(text: str) -> list[str]:
    """nbcompile's internal argument names where the user's should be."""
    return re.findall(r"\bvalues\[\d+\]|`values`|--static values|\barg\d+\b", text)


def test_nnx_grad_of_a_loss_taking_rngs_equals_nnx_value_and_grad(ip):
    """Dropout draws from the nnx.Rngs argument and BatchNorm (training mode) updates its
    statistics inside the gradient: both used to raise TraceContextError."""
    run(ip, NNX_MODEL, NNX_LOSS, "rngs = nnx.Rngs(dropout=5)")
    c = compile_cell(ip, "--grad 0", "loss_fn(model, rngs, x, y)")
    value, grads = c.grad.fn(*c.grad.args, **c.grad.kwargs)
    want_value, want_grads = evaluate(
        ip, "nnx.jit(nnx.value_and_grad(loss_fn))(nnx.clone(model), nnx.clone(rngs), x, y)"
    )
    assert_close(value, want_value, "loss")
    assert_close(grads, want_grads, "gradient")
    assert float(value) > 0 and any(np.abs(np.asarray(g)).sum() > 0 for g in jax.tree.leaves(grads))


def test_static_names_a_function_taking_a_model_by_the_users_names(ip):
    run(
        ip,
        EQX_MODEL,
        """
def apply_n(model, x, n):
    for _ in range(n):
        x = jnp.tanh(jax.vmap(model)(x) @ jnp.ones((2, 3)))
    return x
""",
    )
    err = failure(ip, "%%compile -q\napply_n(model, x, 2)\n")
    assert "argument n" in str(err.__cause__) and not internal_names(words(err)), words(err)
    c = compile_cell(ip, "--static n", "apply_n(model, x, 2)")
    assert_close(outputs(c), evaluate(ip, "eqx.filter_jit(apply_n)(model, x, 2)"), "apply_n")


def test_equinox_partition_pattern_in_the_users_words(ip):
    run(ip, EQX_MODEL, EQX_PARTITION)
    err = failure(ip, "%%compile -q\nloss(params, static, x, y)\n")
    assert err.code == "NBC203"
    assert "argument `static`" in str(err) and "--static static" in str(err), str(err)
    assert not internal_names(words(err)), words(err)
    c = compile_cell(ip, "--static static", "loss(params, static, x, y)")
    assert_close(outputs(c), evaluate(ip, "eqx.filter_jit(loss)(params, static, x, y)"), "loss")
    c = compile_cell(ip, "--grad 0 --static static", "loss(params, static, x, y)")
    got = c.grad.fn(*c.grad.args, **c.grad.kwargs)
    want = evaluate(ip, "jax.value_and_grad(loss)(params, static, x, y)")  # the notebook's way
    assert_close(got[0], want[0], "loss")
    assert_close(got[1], eqx_arrays(want[1]), "gradient")
    res = ip.run_cell("%%compile -q --static values\nloss(params, static, x, y)\n")
    assert not res.success and "arguments are: params, static, x, y" in str(res.error_in_exec)


def eqx_arrays(tree):
    import equinox as eqx

    return eqx.filter(tree, eqx.is_inexact_array)


def test_filter_jit_step_returning_the_model_is_an_output_error(ip):
    """Equinox's standard make_step returns the updated model, whose activation functions are
    no arrays: the problem is an output of the program, not an argument."""
    run(
        ip,
        EQX_MODEL,
        """
import optax
optim = optax.sgd(0.1)
opt_state = optim.init(eqx.filter(model, eqx.is_array))

@eqx.filter_jit
def make_step(model, opt_state, x, y):
    def loss(model, x, y):
        return jnp.mean((jax.vmap(model)(x) - y) ** 2)
    loss_value, grads = eqx.filter_value_and_grad(loss)(model, x, y)
    updates, opt_state = optim.update(grads, opt_state)
    model = eqx.apply_updates(model, updates)
    return model, opt_state, loss_value
""",
    )
    err = failure(ip, "%%compile -q\nmake_step(model, opt_state, x, y)\n")
    assert err.code == "NBC207", words(err)
    assert "returns" in str(err) and "argument" not in str(err), str(err)
    # JAX's own message names the user's function where the user wrote it, not nbcompile's
    assert "make_step at <ipython-input" in str(err.__cause__), str(err.__cause__)


def test_vmap_of_a_model_keeps_the_weights_as_inputs(ip):
    run(ip, EQX_MODEL)
    c = compile_cell(ip, "", "jax.vmap(model)(x)")
    weights = jax.tree.leaves(evaluate(ip, "eqx.filter(model, eqx.is_inexact_array)"))
    invars = c.jaxpr.jaxpr.invars
    assert len(invars) == len(weights) + 1, [v.aval for v in invars]
    assert not [np.shape(k) for k in c.jaxpr.consts if np.size(k) >= 16], "weights baked in"
    assert c.adapted.arg_names == ("model", "x", "model_state"), c.adapted.arg_names
    assert_close(
        outputs(c),
        evaluate(ip, "eqx.filter_jit(lambda m, x: jax.vmap(m)(x))(model, x)"),
        "vmap(model)",
    )


def test_module_paths_are_not_doubled(ip):
    """The program's own jit(NAME) (named after the model, or the user's function) is not a
    module: paths read MLP/hidden, never MLP/MLP/hidden or loss/MLP/hidden."""
    run(ip, NNX_MODEL, "model.eval()", "def total(model, x):\n    return model(x).sum()\n")
    for call, grad in (("model(x)", ""), ("total(model, x)", "--grad 0")):
        c = compile_cell(ip, grad, call)
        for program in (c, c.grad) if grad else (c,):
            modules = {m for f in program.fusions for m in f.modules}
            assert "MLP/hidden" in modules, (call, modules)
            assert all(m.split("/")[0] == "MLP" and "MLP/MLP" not in m for m in modules), (
                call,
                modules,
            )
