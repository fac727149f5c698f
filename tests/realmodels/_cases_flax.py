"""Flax NNX and Linen models, re-implemented for this test after the architectures of Flax's
documentation and examples (google/flax).

Each case is written here from a description of the model: the same layers in the same order,
the same sizes (scaled down where a case says so) and the same Flax API patterns as the
original, in our own code. Training loops and data loading are not part of the cases. The last
cell of each case holds the example data and, where the loss returns ``(loss, logits)``, a scalar
wrapper for ``--grad``.
"""

from __future__ import annotations

from ._helpers import Case

# Architecture of the MNIST CNN in Flax's NNX MNIST tutorial (google/flax,
# docs_nnx/mnist_tutorial.md); re-implemented for this test. The NNX patterns under test: the
# forward takes an optional nnx.Rngs for dropout, a pooling partial kept as a module attribute,
# and nnx.view() gives a training view (dropout on, batch statistics) and an evaluation view.
NNX_MNIST_MODEL = '''
from functools import partial
from flax import nnx

class DigitClassifier(nnx.Module):
    """conv 3x3/32 -> dropout -> batch norm -> relu -> avg pool 2x2, conv 3x3/64 -> batch norm
    -> relu -> avg pool 2x2, then dense 256 -> dropout -> relu -> dense 10."""

    def __init__(self, *, rngs: nnx.Rngs):
        self.first_conv = nnx.Conv(1, 32, kernel_size=(3, 3), rngs=rngs)
        self.first_norm = nnx.BatchNorm(32, rngs=rngs)
        self.conv_dropout = nnx.Dropout(rate=0.025)
        self.second_conv = nnx.Conv(32, 64, kernel_size=(3, 3), rngs=rngs)
        self.second_norm = nnx.BatchNorm(64, rngs=rngs)
        self.pool = partial(nnx.avg_pool, window_shape=(2, 2), strides=(2, 2))
        # two 2x2 poolings take 28x28 down to 7x7, with 64 channels
        self.hidden = nnx.Linear(7 * 7 * 64, 256, rngs=rngs)
        self.hidden_dropout = nnx.Dropout(rate=0.025)
        self.logits = nnx.Linear(256, 10, rngs=rngs)

    def __call__(self, images, rngs: nnx.Rngs | None = None):
        h = self.conv_dropout(self.first_conv(images), rngs=rngs)
        h = self.pool(nnx.relu(self.first_norm(h)))
        h = self.pool(nnx.relu(self.second_norm(self.second_conv(h))))
        h = h.reshape(h.shape[0], -1)
        h = nnx.relu(self.hidden_dropout(self.hidden(h), rngs=rngs))
        return self.logits(h)

model = DigitClassifier(rngs=nnx.Rngs(0))
'''

NNX_MNIST_LOSS = """
import optax

def loss_fn(model, batch, rngs: nnx.Rngs | None = None):
    logits = model(batch['image'], rngs)
    per_example = optax.softmax_cross_entropy_with_integer_labels(
        logits=logits, labels=batch['label'])
    return per_example.mean(), logits

train_model = nnx.view(model, deterministic=False, use_running_average=False)
eval_model = nnx.view(model, deterministic=True, use_running_average=True)
"""

NNX_MNIST_SETUP = """
import jax, jax.numpy as jnp
batch = {'image': jax.random.uniform(jax.random.key(1), (2, 28, 28, 1)),
         'label': jnp.array([3, 7])}
rngs = nnx.Rngs(0)

def loss(model, batch, rngs):
    return loss_fn(model, batch, rngs)[0]
"""

# Architecture of the regression MLP in Flax's NNX functional-API toy example (google/flax,
# examples/nnx_toy_examples/01_functional_api.py); re-implemented for this test. The patterns
# under test: a hand-written Linear holding nnx.Param leaves read through `.value`, a custom
# Variable type counting calls (mutated in the forward), and nnx.split/nnx.merge around a
# jax.jit function taking the two states as arguments.
NNX_FUNCTIONAL = '''
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

# a noisy sine on [-pi, pi]: X is float64 NumPy, Y a JAX array
X = np.linspace(-np.pi, np.pi, 100).reshape(-1, 1)
noise = np.random.default_rng(42).normal(0.0, 0.1, size=X.shape)
Y = 0.8 * jnp.sin(X) + 0.1 + noise


class Dense(nnx.Module):
    def __init__(self, n_in: int, n_out: int, *, rngs: nnx.Rngs):
        self.w = nnx.Param(jax.random.uniform(rngs.params(), (n_in, n_out)))
        self.b = nnx.Param(jnp.zeros((n_out,)))

    def __call__(self, x):
        return x @ self.w.value + self.b.value


class CallCounter(nnx.Variable[nnx.A]):
    """State that is neither a parameter nor a batch statistic."""


class SineRegressor(nnx.Module):
    def __init__(self, n_in, n_hidden, n_out, *, rngs: nnx.Rngs):
        self.calls = CallCounter(jnp.array(0))
        self.inner = Dense(n_in, n_hidden, rngs=rngs)
        self.outer = Dense(n_hidden, n_out, rngs=rngs)

    def __call__(self, x):
        self.calls[...] += 1
        return self.outer(jax.nn.relu(0.5 * self.inner(x)))


graphdef, params, counts = nnx.split(
    SineRegressor(1, 32, 1, rngs=nnx.Rngs(0)), nnx.Param, CallCounter)


@jax.jit
def test_step(params: nnx.State, counts: nnx.State, batch):
    inputs, targets = batch
    regressor = nnx.merge(graphdef, params, counts)
    squared = (targets - regressor(inputs)) ** 2
    return {'loss': jnp.mean(squared)}
'''

NNX_FUNCTIONAL_SETUP = """
def loss(params, counts, batch):
    return test_step(params, counts, batch)['loss']
"""

# Architecture of the Linen CNN of Flax's MNIST example before it moved to NNX (google/flax,
# examples/mnist/train.py); re-implemented for this test. The patterns under test: an
# @nn.compact module, params from model.init, and a loss calling
# model.apply({'params': params}, ...) with one-hot labels.
LINEN_MNIST = '''
from flax import linen as nn
import jax
import jax.numpy as jnp
import optax


class ConvClassifier(nn.Module):
    """Two blocks of conv 3x3 -> relu -> avg pool 2x2 (32 then 64 channels), then
    dense 256 -> relu -> dense 10."""

    @nn.compact
    def __call__(self, images):
        h = images
        for channels in (32, 64):
            h = nn.relu(nn.Conv(features=channels, kernel_size=(3, 3))(h))
            h = nn.avg_pool(h, window_shape=(2, 2), strides=(2, 2))
        h = h.reshape((h.shape[0], -1))
        h = nn.relu(nn.Dense(features=256)(h))
        return nn.Dense(features=10)(h)
'''

LINEN_MNIST_SETUP = """
cnn = ConvClassifier()
params = cnn.init(jax.random.key(0), jnp.ones([1, 28, 28, 1]))['params']
images = jax.random.uniform(jax.random.key(1), (2, 28, 28, 1))
labels = jnp.array([4, 9])

def loss_fn(params, images, labels):
    logits = cnn.apply({'params': params}, images)
    targets = jax.nn.one_hot(labels, 10)
    return jnp.mean(optax.softmax_cross_entropy(logits=logits, labels=targets))
"""

# Architecture of the ResNet v1.5 with basic (two 3x3 conv) blocks of Flax's ImageNet example
# (google/flax, examples/imagenet/models.py); re-implemented for this test. The patterns under
# test: conv and BatchNorm passed into the block as partials (no conv bias; BatchNorm with
# momentum 0.9, epsilon 1e-5, axis_name='batch' and use_running_average from `train`), a
# zero-initialised scale on each block's last norm, a 1x1 projection where the shape changes,
# and a functools.partial of the module fixing the stage layout.
LINEN_RESNET = '''
from functools import partial
from typing import Any
from collections.abc import Callable, Sequence

from flax import linen as nn
import jax.numpy as jnp


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with a residual connection (projected by a 1x1 conv when the
    stride or the width changes)."""

    width: int
    make_conv: Any
    make_norm: Any
    activation: Callable
    stride: tuple[int, int] = (1, 1)

    @nn.compact
    def __call__(self, x):
        out = self.make_conv(self.width, (3, 3), self.stride)(x)
        out = self.activation(self.make_norm()(out))
        out = self.make_conv(self.width, (3, 3))(out)
        # the block starts out as the identity: its last norm scales by zero
        out = self.make_norm(scale_init=nn.initializers.zeros_init())(out)
        shortcut = x
        if shortcut.shape != out.shape:
            shortcut = self.make_conv(self.width, (1, 1), self.stride, name='shortcut_conv')(x)
            shortcut = self.make_norm(name='shortcut_norm')(shortcut)
        return self.activation(shortcut + out)


class ResNet(nn.Module):
    """Stem (7x7/2 conv, norm, relu, 3x3/2 max pool), stages of blocks whose width doubles
    (and whose first block halves the resolution) after the first stage, global average pool,
    dense classifier."""

    stage_sizes: Sequence[int]
    block_cls: Any
    num_classes: int
    num_filters: int = 64
    dtype: Any = jnp.float32
    activation: Callable = nn.relu
    conv_cls: Any = nn.Conv

    @nn.compact
    def __call__(self, x, train: bool = True):
        make_conv = partial(self.conv_cls, use_bias=False, dtype=self.dtype)
        make_norm = partial(nn.BatchNorm, use_running_average=not train, momentum=0.9,
                            epsilon=1e-5, dtype=self.dtype, axis_name='batch')
        x = make_conv(self.num_filters, (7, 7), (2, 2), padding=[(3, 3), (3, 3)],
                      name='stem_conv')(x)
        x = nn.relu(make_norm(name='stem_norm')(x))
        x = nn.max_pool(x, (3, 3), strides=(2, 2), padding='SAME')
        for stage, n_blocks in enumerate(self.stage_sizes):
            for index in range(n_blocks):
                downsample = stage > 0 and index == 0
                x = self.block_cls(self.num_filters * 2**stage, make_conv, make_norm,
                                   self.activation, (2, 2) if downsample else (1, 1))(x)
        x = x.mean(axis=(1, 2))
        x = nn.Dense(self.num_classes, dtype=self.dtype)(x)
        return jnp.asarray(x, self.dtype)


ResNet18 = partial(ResNet, stage_sizes=[2, 2, 2, 2], block_cls=BasicBlock)
'''

# Sizes: two stages of one block and 8 filters (ResNet18: four stages of two, 64 filters).
# BatchNorm's axis_name='batch' needs a pmap/shard_map axis in training mode, so the forward
# and the gradient run in evaluation mode (train=False). The variables are initialised under
# jax.jit, as a training script would.
LINEN_RESNET_SETUP = """
import jax, optax
model = ResNet18(stage_sizes=[1, 1], num_classes=10, num_filters=8)
x = jax.random.normal(jax.random.key(0), (2, 32, 32, 3))
labels = jnp.array([1, 8])
variables = jax.jit(partial(model.init, train=False))(jax.random.key(1), x)

def loss(params, batch_stats, x, labels):
    logits = model.apply({'params': params, 'batch_stats': batch_stats}, x, train=False)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
"""

CASES = [
    Case(
        name="nnx_mnist_tutorial",
        credit="Architecture of the MNIST CNN in Flax's NNX MNIST tutorial (google/flax, "
        "docs_nnx/mnist_tutorial.md); re-implemented for this test.",
        cells=(NNX_MNIST_MODEL, NNX_MNIST_LOSS, NNX_MNIST_SETUP),
        forward="eval_model(batch['image'])",
        forward_ref="nnx.jit(lambda m, x: m(x))(eval_model, batch['image'])",
        # the loss takes an nnx.Rngs argument for dropout; BatchNorm in training mode
        loss="loss(train_model, batch, rngs)",
        grad_ref="nnx.jit(nnx.value_and_grad(loss))(nnx.clone(train_model), batch, "
        "nnx.clone(rngs))",
    ),
    Case(
        name="nnx_functional_api",
        credit="Architecture of the MLP in Flax's NNX functional-API toy example (google/flax, "
        "examples/nnx_toy_examples/01_functional_api.py); re-implemented for this test.",
        cells=(NNX_FUNCTIONAL, NNX_FUNCTIONAL_SETUP),
        forward="test_step(params, counts, (X, Y))",
        forward_ref="test_step(params, counts, (X, Y))",  # already a jax.jit function
        loss="loss(params, counts, (X, Y))",
        grad_ref="jax.jit(jax.value_and_grad(loss))(params, counts, (X, Y))",
    ),
    Case(
        name="linen_mnist_cnn",
        credit="Architecture of the Linen CNN of Flax's MNIST example (google/flax, "
        "examples/mnist/train.py, Linen version); re-implemented for this test.",
        cells=(LINEN_MNIST, LINEN_MNIST_SETUP),
        forward="cnn.apply({'params': params}, images)",
        forward_ref="jax.jit(cnn.apply)({'params': params}, images)",
        loss="loss_fn(params, images, labels)",
        grad_ref="jax.jit(jax.value_and_grad(loss_fn))(params, images, labels)",
    ),
    Case(
        name="linen_imagenet_resnet",
        credit="Architecture of the ResNet v1.5 of Flax's ImageNet example (google/flax, "
        "examples/imagenet/models.py); re-implemented for this test.",
        cells=(LINEN_RESNET, LINEN_RESNET_SETUP),
        forward="model.apply(variables, x, train=False)",
        forward_ref="jax.jit(partial(model.apply, train=False))(variables, x)",
        loss="loss(variables['params'], variables['batch_stats'], x, labels)",
        grad_ref="jax.jit(jax.value_and_grad(loss))(variables['params'], "
        "variables['batch_stats'], x, labels)",
    ),
]
