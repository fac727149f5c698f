"""The four models of issue 42's whiteboard picture, as a notebook user writes them: each is
a list of cells (model code, example data) and a ``%%compile --grad`` cell.

- ``mlp``: plain JAX, ``layer(p, x)`` called ten times by ``mlp(params, x)`` from a loop, a
  mean-squared loss: the picture ``loss#1 > mlp#1 > layer#1 … layer#10``.
- ``nnx``: a Flax NNX transformer, four ``Block`` modules in an ``nnx.List`` (``blocks_0`` …
  ``blocks_3``), each LayerNorm → attention → LayerNorm → MLP (gelu), a linear head.
- ``equinox``: Equinox's MNIST CNN (a list of layers and plain functions, ``layers_0`` …
  ``layers_9``, a function named with its own name: ``layers_2 (relu)``; the forward on one
  image, batched by ``jax.vmap``).
- ``convnet``: a plain-JAX convnet: two calls of the user's ``conv(w, x)``, then dense layers
  and the loss written inline (ops outside any call).

``CALLS[name]``: the groups the first Graph view must show (the user's calls or modules);
``SUBTITLES[name]``: a group of the first Graph view and its subtitle (output shape, parameters).
"""

from __future__ import annotations

MLP = [
    """import jax, jax.numpy as jnp, numpy as np

def layer(p, x):
    return jnp.tanh(x @ p["w"] + p["b"])

def mlp(params, x):
    for p in params:
        x = layer(p, x)
    return x

rng = np.random.default_rng(0)
params = [{"w": jnp.asarray(rng.normal(size=(32, 32)) * 0.2, jnp.float32),
           "b": jnp.zeros((32,), jnp.float32)} for _ in range(10)]
xs = jnp.asarray(rng.normal(size=(16, 32)), jnp.float32)
ys = jnp.asarray(rng.normal(size=(16, 32)), jnp.float32)""",
]
MLP_CELL = """%%compile --grad
def loss(params, x, y):
    return jnp.mean((mlp(params, x) - y) ** 2)
loss(params, xs, ys)"""

NNX = [
    """import jax, jax.numpy as jnp
from flax import nnx

class Attention(nnx.Module):
    def __init__(self, d, heads, *, rngs):
        self.heads = heads
        self.qkv = nnx.Linear(d, 3 * d, rngs=rngs)
        self.out = nnx.Linear(d, d, rngs=rngs)

    def __call__(self, x):
        b, t, d = x.shape
        q, k, v = jnp.split(self.qkv(x), 3, axis=-1)
        split = lambda y: y.reshape(b, t, self.heads, d // self.heads).transpose(0, 2, 1, 3)
        q, k, v = split(q), split(k), split(v)
        w = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / jnp.sqrt(d // self.heads), axis=-1)
        return self.out((w @ v).transpose(0, 2, 1, 3).reshape(b, t, d))

class Block(nnx.Module):
    def __init__(self, d, heads, *, rngs):
        self.norm1 = nnx.LayerNorm(d, rngs=rngs)
        self.attn = Attention(d, heads, rngs=rngs)
        self.norm2 = nnx.LayerNorm(d, rngs=rngs)
        self.up = nnx.Linear(d, 4 * d, rngs=rngs)
        self.down = nnx.Linear(4 * d, d, rngs=rngs)

    def __call__(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.down(jax.nn.gelu(self.up(self.norm2(x))))

class Transformer(nnx.Module):
    def __init__(self, d=32, depth=4, heads=4, vocab=64, *, rngs):
        self.blocks = nnx.List([Block(d, heads, rngs=rngs) for _ in range(depth)])
        self.head = nnx.Linear(d, vocab, rngs=rngs)

    def __call__(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)

model = Transformer(rngs=nnx.Rngs(0))
x = jax.random.normal(jax.random.key(1), (2, 8, 32))
targets = jax.random.randint(jax.random.key(2), (2, 8), 0, 64)""",
]
NNX_CELL = """%%compile --grad
def loss(model, x, targets):
    logp = jax.nn.log_softmax(model(x), axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))
loss(model, x, targets)"""

EQUINOX = [
    """import equinox as eqx
import jax, jax.numpy as jnp

class CNN(eqx.Module):
    layers: list

    def __init__(self, key):
        key1, key2, key3, key4 = jax.random.split(key, 4)
        self.layers = [
            eqx.nn.Conv2d(1, 3, kernel_size=4, key=key1),
            eqx.nn.MaxPool2d(kernel_size=2),
            jax.nn.relu,
            jnp.ravel,
            eqx.nn.Linear(1728, 512, key=key2),
            jax.nn.sigmoid,
            eqx.nn.Linear(512, 64, key=key3),
            jax.nn.relu,
            eqx.nn.Linear(64, 10, key=key4),
            jax.nn.log_softmax,
        ]

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

model = CNN(jax.random.key(0))
images = jax.random.normal(jax.random.key(1), (4, 1, 28, 28))
labels = jnp.array([0, 3, 5, 9])""",
]
EQUINOX_CELL = """%%compile --grad
def loss(model, x, y):
    pred = jax.vmap(model)(x)
    return -jnp.mean(jnp.take_along_axis(pred, y[:, None], axis=1))
loss(model, images, labels)"""

CONVNET = [
    """import jax, jax.numpy as jnp, numpy as np
from jax import lax

def conv(w, x):
    y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return jax.nn.relu(y)

rng = np.random.default_rng(0)
params = {"c1": jnp.asarray(rng.normal(size=(3, 3, 1, 8)) * 0.3, jnp.float32),
          "c2": jnp.asarray(rng.normal(size=(3, 3, 8, 8)) * 0.1, jnp.float32),
          "d1": jnp.asarray(rng.normal(size=(8 * 8 * 8, 64)) * 0.05, jnp.float32),
          "d2": jnp.asarray(rng.normal(size=(64, 10)) * 0.1, jnp.float32)}
images = jnp.asarray(rng.normal(size=(4, 8, 8, 1)), jnp.float32)
onehot = jax.nn.one_hot(jnp.array([1, 3, 5, 7]), 10)""",
]
CONVNET_CELL = """%%compile --grad
def loss(params, x, y):
    x = conv(params["c1"], x)
    x = conv(params["c2"], x)
    x = x.reshape(x.shape[0], -1)
    x = jax.nn.relu(x @ params["d1"])
    logits = x @ params["d2"]
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))
loss(params, images, onehot)"""

MODELS = {
    "mlp": (MLP, MLP_CELL),
    "nnx": (NNX, NNX_CELL),
    "equinox": (EQUINOX, EQUINOX_CELL),
    "convnet": (CONVNET, CONVNET_CELL),
}

#: the groups (the user's calls or modules) the first Graph view draws, by model
CALLS = {
    "mlp": [f"layer#{k}" for k in range(1, 11)],
    "nnx": [f"blocks_{k}" for k in range(4)],
    "equinox": ["layers_0", "layers_2 (relu)", "layers_4", "layers_6", "layers_8"],
    "convnet": ["conv#1", "conv#2"],
}

#: a group of the first Graph view and its subtitle: output shape, parameter count (its weights)
SUBTITLES = {
    "mlp": ("layer#3", "(16, 32) · 1.06K params"),  # 32 x 32 + 32
    "nnx": ("blocks_0", "(2, 8, 32) · 12.7K params"),
    "equinox": ("layers_4", "(4, 512) · 885K params"),  # 1728 x 512 + 512
    "convnet": ("conv#2", "(4, 8, 8, 8) · 576 params"),  # 3 x 3 x 8 x 8
}

BACKWARD = " (backward)"


def _cut(path: str, library: set[str]) -> list[str]:
    """A call path's labels down to the first library call (``gelu``: a kernel's name)."""
    out = []
    for label in (c for c in path.split("/") if c):
        if label.removesuffix(BACKWARD) in library:
            break
        out.append(label)
    return out


def _common(paths: list[list[str]]) -> list[str]:
    out = []
    for parts in zip(*paths, strict=False):
        if any(p != parts[0] for p in parts):
            break
        out.append(parts[0])
    return out


def place_error(
    kernel: str,
    inside: list[str],
    functions: list[str],
    modules: list[str],
    top_level: bool,
    library: set[str],
) -> str | None:
    """Why a kernel drawn inside the groups ``inside`` (outermost first) is not in the calls
    and modules it came from (XLA's op metadata: ``Fusion.functions``, ``Fusion.modules``), or
    None. It must be inside every group all its ops share, and only in groups holding one of its
    ops (XLA merges equal constants of several calls into one named after the first, so a
    kernel's metadata may name a call it only took a constant from). A forward call fused into a
    backward kernel is read as its backward twin; ``top_level``: one of its ops is outside
    every module and call (the kernel sits at the top)."""
    calls = [_cut(p, library) for p in functions]
    if any(c.endswith(BACKWARD) for p in calls for c in p):
        calls = [[c if c.endswith(BACKWARD) else c + BACKWARD for c in p] for p in calls]
    mods = [[m for m in p.split("/") if m] for p in modules if p]
    got_mods = [g.removesuffix(BACKWARD) for g in inside if "#" not in g]
    got_mods = [g for g in got_mods if not g.startswith("outside your calls")]
    for got, paths in (([g for g in inside if "#" in g], calls), (got_mods, mods)):
        if not paths:
            if got:
                return f"{kernel}: drawn in {inside}, its ops are in none"
            continue
        want = [] if top_level else _common(paths)
        if got[: len(want)] != want:
            return f"{kernel}: drawn in {inside}, not inside {want} (its ops: {paths})"
        if not any(p[: len(got)] == got for p in paths):
            return f"{kernel}: drawn in {inside}, which holds none of its ops ({paths})"
    return None
