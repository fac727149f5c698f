"""Equinox models, re-implemented for this test after the architectures of Equinox's
documentation examples (patrick-kidger/equinox).

Each case is written here from a description of the model: the same layers in the same order,
the same sizes and the same Equinox API patterns as the original, in our own code. Data loading
and the training loops are not part of the cases, except the two training steps the stateful
case needs to move its BatchNorm state away from its initial values. The last cell of each case
holds the example data or the scalar loss and reference gradient the tests call.
"""

from __future__ import annotations

from ._helpers import Case

# Architecture of the CNN in Equinox's MNIST example (patrick-kidger/equinox,
# docs/examples/mnist.ipynb); re-implemented for this test. The patterns under test: an
# eqx.Module whose single field is a list mixing layers with plain functions (activations,
# jnp.ravel), jaxtyping annotations, a legacy uint32 PRNGKey, and a forward on one unbatched
# image, batched by jax.vmap(model).
EQX_MNIST = """
import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

master_key = jax.random.PRNGKey(5678)
"""

EQX_MNIST_MODEL = '''
class SmallConvNet(eqx.Module):
    """conv 4x4/3 -> max pool 2 (stride 1) -> relu -> flatten -> 512 (sigmoid) -> 64 (relu)
    -> 10 (log-softmax), on one (1, 28, 28) image."""

    stack: list

    def __init__(self, key):
        k_conv, k_wide, k_narrow, k_out = jax.random.split(key, 4)
        # 28 - 4 + 1 = 25 after the conv, 24 after the pool: 3 * 24 * 24 = 1728 features
        self.stack = [
            eqx.nn.Conv2d(1, 3, kernel_size=4, key=k_conv),
            eqx.nn.MaxPool2d(kernel_size=2),
            jax.nn.relu,
            jnp.ravel,
            eqx.nn.Linear(3 * 24 * 24, 512, key=k_wide),
            jax.nn.sigmoid,
            eqx.nn.Linear(512, 64, key=k_narrow),
            jax.nn.relu,
            eqx.nn.Linear(64, 10, key=k_out),
            jax.nn.log_softmax,
        ]

    def __call__(self, image: Float[Array, "1 28 28"]) -> Float[Array, "10"]:
        out = image
        for step in self.stack:
            out = step(out)
        return out


master_key, model_key = jax.random.split(master_key)
model = SmallConvNet(model_key)
'''

EQX_MNIST_LOSS = """
def nll(labels: Int[Array, " n"], log_probs: Float[Array, "n 10"]) -> Float[Array, ""]:
    picked = jnp.take_along_axis(log_probs, labels[:, None], axis=1)
    return -jnp.mean(picked)


def loss(model: SmallConvNet, x: Float[Array, "n 1 28 28"],
         y: Int[Array, " n"]) -> Float[Array, ""]:
    # the model sees one image at a time; vmap adds the batch axis
    return nll(y, jax.vmap(model)(x))
"""

# Sizes: a batch of 4 random images instead of MNIST batches.
EQX_MNIST_SETUP = """
dummy_x = jax.random.normal(jax.random.key(1), (4, 1, 28, 28))
dummy_y = jnp.array([0, 3, 5, 9])
"""

# Architecture of the model in Equinox's stateful-layers example (patrick-kidger/equinox,
# docs/examples/stateful.ipynb); re-implemented for this test. The patterns under test:
# eqx.nn.BatchNorm (default mode) and eqx.nn.SpectralNorm threading an eqx.nn.State, built by
# eqx.nn.make_with_state, batched by jax.vmap with axis_name='batch' and the state unbatched;
# an eqx.filter_jit training step with filter_grad(has_aux=True); then
# eqx.nn.inference_mode and the state bound by eqx.Partial for evaluation.
EQX_STATEFUL = '''
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import optax


class NormedRegressor(eqx.Module):
    """batch norm (3) -> spectrally normalised linear 3->32 -> relu -> batch norm (32) ->
    linear 32->32 -> relu -> linear 32->3."""

    in_norm: eqx.nn.BatchNorm
    projection: eqx.nn.SpectralNorm[eqx.nn.Linear]
    mid_norm: eqx.nn.BatchNorm
    hidden: eqx.nn.Linear
    readout: eqx.nn.Linear

    def __init__(self, key):
        k_proj, k_spectral, k_hidden, k_readout = jr.split(key, 4)
        self.in_norm = eqx.nn.BatchNorm(input_size=3, axis_name="batch")
        self.projection = eqx.nn.SpectralNorm(
            layer=eqx.nn.Linear(in_features=3, out_features=32, key=k_proj),
            weight_name="weight", key=k_spectral)
        self.mid_norm = eqx.nn.BatchNorm(input_size=32, axis_name="batch")
        self.hidden = eqx.nn.Linear(in_features=32, out_features=32, key=k_hidden)
        self.readout = eqx.nn.Linear(in_features=32, out_features=3, key=k_readout)

    def __call__(self, x, state):
        x, state = self.in_norm(x, state)
        x, state = self.projection(x, state)
        x, state = self.mid_norm(jax.nn.relu(x), state)
        x = jax.nn.relu(self.hidden(x))
        return self.readout(x), state


def compute_loss(model, state, xs, ys):
    # examples along axis 0, one state shared by all of them (and returned once)
    batched = jax.vmap(model, axis_name="batch", in_axes=(0, None), out_axes=(0, None))
    predictions, state = batched(xs, state)
    return jnp.mean((predictions - ys) ** 2), state


@eqx.filter_jit
def sgd_step(model, state, opt_state, xs, ys):
    grads, state = eqx.filter_grad(compute_loss, has_aux=True)(model, state, xs, ys)
    updates, opt_state = optim.update(grads, opt_state)
    return eqx.apply_updates(model, updates), state, opt_state
'''

# Sizes: 10 training examples, 2 full-batch steps.
EQX_STATEFUL_TRAIN = """
model_key, train_key, test_key = jr.split(jr.PRNGKey(5678), 3)
model, state = eqx.nn.make_with_state(NormedRegressor)(model_key)

xs = jr.normal(train_key, (10, 3))
ys = jnp.sin(xs) + 1
optim = optax.adam(3e-4)
opt_state = optim.init(eqx.filter(model, eqx.is_inexact_array))

for _ in range(2):
    model, state, opt_state = sgd_step(model, state, opt_state, xs, ys)
"""

EQX_STATEFUL_INFERENCE = """
inference_model = eqx.Partial(eqx.nn.inference_mode(model), state=state)


@eqx.filter_jit
def evaluate(model, xs):
    predictions, _unused_state = jax.vmap(model)(xs)
    return predictions


test_xs = jr.normal(test_key, (5, 3))
test_predictions = evaluate(inference_model, test_xs)
"""

EQX_STATEFUL_SETUP = """
def loss(model, state, xs, ys):
    return compute_loss(model, state, xs, ys)[0]

@eqx.filter_jit
def reference_grad(model, state, xs, ys):
    (value, _), grads = eqx.filter_value_and_grad(compute_loss, has_aux=True)(
        model, state, xs, ys)
    return value, grads
"""

CASES = [
    Case(
        name="eqx_mnist_cnn",
        credit="Architecture of the CNN in Equinox's MNIST example (patrick-kidger/equinox, "
        "docs/examples/mnist.ipynb); re-implemented for this test.",
        cells=(EQX_MNIST, EQX_MNIST_MODEL, EQX_MNIST_LOSS, EQX_MNIST_SETUP),
        # inference as the example does it: the model in jax.vmap's closure
        forward="jax.vmap(model)(dummy_x)",
        forward_ref="eqx.filter_jit(lambda m, x: jax.vmap(m)(x))(model, dummy_x)",
        loss="loss(model, dummy_x, dummy_y)",
        grad_ref="eqx.filter_jit(eqx.filter_value_and_grad(loss))(model, dummy_x, dummy_y)",
    ),
    Case(
        name="eqx_stateful_batchnorm",
        credit="Architecture of the model in Equinox's stateful-layers example "
        "(patrick-kidger/equinox, docs/examples/stateful.ipynb); re-implemented for this test.",
        cells=(EQX_STATEFUL, EQX_STATEFUL_TRAIN, EQX_STATEFUL_INFERENCE, EQX_STATEFUL_SETUP),
        forward="evaluate(inference_model, test_xs)",
        forward_ref="evaluate(inference_model, test_xs)",  # already an eqx.filter_jit function
        loss="loss(model, state, xs, ys)",
        grad_ref="reference_grad(model, state, xs, ys)",
    ),
]
