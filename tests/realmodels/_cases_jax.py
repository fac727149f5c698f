"""Pure-JAX models: a from-scratch MNIST MLP re-implemented after the architecture of JAX's
example, and the GPT-2 of ``benchmarks/_gpt2.py``.

The MLP is written here from a description of the model (same layers, same parameter layout
and NumPy initialisation, sizes scaled down), in our own code. The last cell of each case holds
the example data.
"""

from __future__ import annotations

from ._helpers import Case

# Architecture of the MLP in JAX's from-scratch MNIST classifier (jax-ml/jax,
# examples/mnist_classifier_fromscratch.py); re-implemented for this test. The patterns under
# test: parameters as a list of (weights, bias) float64 NumPy pairs drawn from a
# np.random.RandomState, tanh hidden layers, log-softmax outputs through logsumexp, and a loss
# taking a (inputs, one-hot targets) tuple.
JAX_MNIST = '''
import numpy.random as npr

from jax import jit
from jax.scipy.special import logsumexp
import jax.numpy as jnp


def init_random_params(scale, layer_sizes, rng=npr.RandomState(0)):
    """One (weights, bias) pair per consecutive pair of sizes, normal with std `scale`."""
    pairs = []
    for fan_in, fan_out in zip(layer_sizes[:-1], layer_sizes[1:]):
        pairs.append((scale * rng.randn(fan_in, fan_out), scale * rng.randn(fan_out)))
    return pairs


def predict(params, inputs):
    """Log-probabilities of the classes for a batch of flattened images."""
    *hidden_layers, (w_out, b_out) = params
    h = inputs
    for w, b in hidden_layers:
        h = jnp.tanh(jnp.dot(h, w) + b)
    scores = jnp.dot(h, w_out) + b_out
    return scores - logsumexp(scores, axis=1, keepdims=True)


def loss(params, batch):
    inputs, one_hot = batch
    log_probs = predict(params, inputs)
    return -jnp.mean(jnp.sum(log_probs * one_hot, axis=1))
'''

# Sizes: hidden layers of 64 (the example: [784, 1024, 1024, 10]), a batch of 4. The
# parameters are float64 NumPy arrays; jax.jit computes in float32 (x64 off), and so does
# nbcompile.
JAX_MNIST_SETUP = """
import jax
params = init_random_params(0.1, [784, 64, 64, 10])
images = npr.RandomState(1).rand(4, 784).astype("float32")
labels = jnp.eye(10)[jnp.array([1, 4, 7, 9])]
batch = (images, labels)
"""

# benchmarks/_gpt2.py: the project's jax.numpy GPT-2 (structured like picoGPT's gpt2.py),
# imported as a notebook user imports their own file. Sizes: 2 layers, width 32, 2 heads,
# vocabulary 64, context 8 (GPT-2 small: 12, 768, 12, 50257, 1024).
JAX_GPT2 = """
import jax
import jax.numpy as jnp
from benchmarks._gpt2 import gpt2_forward

forward, (params, tokens) = gpt2_forward(n_layer=2, d=32, n_head=2, vocab=64, n_ctx=8)
targets = jnp.roll(tokens, -1)

def loss_fn(params, tokens, targets):
    logits = forward(params, tokens)
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, targets[:, None], axis=-1))
"""

CASES = [
    Case(
        name="jax_mnist_fromscratch",
        credit="Architecture of the MLP in JAX's from-scratch MNIST classifier (jax-ml/jax, "
        "examples/mnist_classifier_fromscratch.py); re-implemented for this test.",
        cells=(JAX_MNIST, JAX_MNIST_SETUP),
        forward="predict(params, images)",
        forward_ref="jit(predict)(params, images)",
        loss="loss(params, batch)",
        grad_ref="jit(jax.value_and_grad(loss))(params, batch)",
    ),
    Case(
        name="jax_picogpt2",
        credit="benchmarks/_gpt2.py (the project's GPT-2, structured like picoGPT's gpt2.py)",
        cells=(JAX_GPT2,),
        forward="forward(params, tokens)",
        forward_ref="jax.jit(forward)(params, tokens)",
        loss="loss_fn(params, tokens, targets)",
        grad_ref="jax.jit(jax.value_and_grad(loss_fn))(params, tokens, targets)",
    ),
]
