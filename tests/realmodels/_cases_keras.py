"""Keras 3 models (JAX backend), re-implemented for this test after the architectures of
keras-io's examples and guides (keras-team/keras-io).

Each case is written here from a description of the model: the same layers in the same order,
the same sizes (scaled down where a case says so) and the same Keras API patterns as the
original, in our own code. Dataset loading, ``compile``/``fit`` and plots are not part of the
cases. The gradient reference follows the pattern of keras-io's guide to custom training loops
in JAX: a loss around ``model.stateless_call`` under ``jax.value_and_grad(..., has_aux=True)``.
"""

from __future__ import annotations

from ._helpers import Case

# Architecture of the convnet in keras-io's MNIST example (keras-team/keras-io,
# examples/vision/mnist_convnet.py); re-implemented for this test. The pattern under test: a
# keras.Sequential built from a list, with an Input, activations given by name, and dropout.
KERAS_CONVNET = """
import numpy as np
import keras
from keras import layers

n_digits = 10

model = keras.Sequential([
    keras.Input(shape=(28, 28, 1)),
    # two conv 3x3 + relu / max pool 2x2 blocks, 32 then 64 filters
    layers.Conv2D(32, kernel_size=(3, 3), activation="relu"),
    layers.MaxPooling2D(pool_size=(2, 2)),
    layers.Conv2D(64, kernel_size=(3, 3), activation="relu"),
    layers.MaxPooling2D(pool_size=(2, 2)),
    layers.Flatten(),
    layers.Dropout(0.5),
    layers.Dense(n_digits, activation="softmax"),
])
"""

# The reference for the gradient: Keras's stateless API under jax.value_and_grad, the way a
# custom JAX training loop computes a loss and the updated non-trainable variables
# (the pattern of keras-io's guides/writing_a_custom_training_loop_in_jax.py).
KERAS_JAX_LOOP = """
import jax

def stateless_loss(trainable, non_trainable, x, y):
    predictions, non_trainable = model.stateless_call(trainable, non_trainable, x)
    return loss_fn(y, predictions), non_trainable


grad_fn = jax.value_and_grad(stateless_loss, has_aux=True)
"""

KERAS_CONVNET_SETUP = """
loss_fn = keras.losses.CategoricalCrossentropy()
x = np.random.default_rng(0).random((2, 28, 28, 1), dtype="float32")
y = keras.utils.to_categorical(np.array([3, 8]), n_digits)

def compute_loss(model, x, y):
    return loss_fn(y, model(x))
"""

# Architecture of the multi-input, multi-output model of keras-io's functional API guide
# (keras-team/keras-io, guides/functional_api.py, the ticket-triage model); re-implemented for
# this test. The patterns under test: a functional keras.Model over three named Inputs (two
# variable-length token sequences, one fixed-size vector) with two outputs: embeddings, LSTMs
# reducing each sequence to a vector, a concatenation, and two dense heads.
KERAS_MULTI_IO = """
import numpy as np
import keras
from keras import layers

n_tags = 12
vocab_size = 10000
n_departments = 4

title_tokens = keras.Input(shape=(None,), name="title")
body_tokens = keras.Input(shape=(None,), name="body")
tag_flags = keras.Input(shape=(n_tags,), name="tags")

# each sequence: 64-wide embeddings summed up by an LSTM (128 units for the title, 32 for the
# body)
title_vector = layers.LSTM(128)(layers.Embedding(vocab_size, 64)(title_tokens))
body_vector = layers.LSTM(32)(layers.Embedding(vocab_size, 64)(body_tokens))
features = layers.concatenate([title_vector, body_vector, tag_flags])

priority = layers.Dense(1, name="priority")(features)
department = layers.Dense(n_departments, name="department")(features)

model = keras.Model(inputs=[title_tokens, body_tokens, tag_flags],
                    outputs=[priority, department])
"""

# Sizes: 2 tickets, titles of 10 and bodies of 20 tokens. The loss weighs a from-logits binary
# cross-entropy on the priority by 1 and a from-logits categorical cross-entropy on the
# department by 0.2.
KERAS_MULTI_IO_SETUP = """
rng = np.random.default_rng(0)
inputs = [rng.integers(vocab_size, size=(2, 10)),  # title tokens
          rng.integers(vocab_size, size=(2, 20)),  # body tokens
          rng.integers(2, size=(2, n_tags)).astype("float32")]
targets = [rng.random(size=(2, 1)).astype("float32"),
           rng.integers(2, size=(2, n_departments)).astype("float32")]
priority_xent = keras.losses.BinaryCrossentropy(from_logits=True)
department_xent = keras.losses.CategoricalCrossentropy(from_logits=True)

def loss_fn(targets, preds):
    priority_term = priority_xent(targets[0], preds[0])
    department_term = department_xent(targets[1], preds[1])
    return priority_term + 0.2 * department_term

def compute_loss(model, inputs, targets):
    return loss_fn(targets, model(inputs))
"""

# nbcompile keys a Keras model's gradients by variable path; the reference lists them in
# model.trainable_variables order
REFERENCE = """
def reference_grad(x, y):
    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]
    (loss, _), grads = jax.jit(grad_fn)(trainable, non_trainable, x, y)
    return loss, {v.path: g for v, g in zip(model.trainable_variables, grads)}

def reference_forward(x):
    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]
    return jax.jit(lambda t, n, x: model.stateless_call(t, n, x)[0])(trainable, non_trainable, x)
"""

CASES = [
    Case(
        name="keras_mnist_convnet",
        credit="Architecture of the convnet in keras-io's MNIST example (keras-team/keras-io, "
        "examples/vision/mnist_convnet.py); re-implemented for this test.",
        cells=(KERAS_CONVNET, KERAS_CONVNET_SETUP, KERAS_JAX_LOOP, REFERENCE),
        forward="model(x)",
        forward_ref="reference_forward(x)",
        loss="compute_loss(model, x, y)",
        grad_ref="reference_grad(x, y)",
    ),
    Case(
        name="keras_functional_multi_io",
        credit="Architecture of the multi-input, multi-output model of keras-io's functional "
        "API guide (keras-team/keras-io, guides/functional_api.py); re-implemented for this "
        "test.",
        cells=(KERAS_MULTI_IO, KERAS_MULTI_IO_SETUP, KERAS_JAX_LOOP, REFERENCE),
        forward="model(inputs)",
        forward_ref="reference_forward(inputs)",
        loss="compute_loss(model, inputs, targets)",
        grad_ref="reference_grad(inputs, targets)",
    ),
]
