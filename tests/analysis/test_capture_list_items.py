"""A plain function in a model's list is named by its place and itself: ``layers_2 (relu)``
(issue 42 item 4; ``capture/_listitems.py``), under both call-capture backends.

Equinox's idiom keeps functions beside modules in one list and runs them from a loop
(``for layer in self.layers: x = layer(x)``); the modules were named ``layers_0`` …, the
functions after the loop variable (``layer``, ``layer#2``). The CNN below is Equinox's MNIST
example (docs.kidger.site/equinox/examples/mnist, Patrick Kidger, Apache-2.0), used as test
data; the MLP repeats ``relu`` (told apart by order), another list holds the user's own
function (a call of theirs: ``layers_1 (swish)``), and the same idiom is checked in a Flax NNX
``nnx.List`` and a Linen ``setup`` list. A plain-JAX loop over functions, outside any
model, keeps the loop variable's name. The models are this file's own: a test file is the
user's code.
"""

from __future__ import annotations

import sys

import equinox as eqx
import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest
from flax import nnx

import nbcompile

pytestmark = pytest.mark.usefixtures("relaxed_dtypes")
BACKENDS = ["frames"] + (["monitoring"] if sys.version_info >= (3, 12) else [])


class CNN(eqx.Module):  # Equinox's MNIST example (see the module docstring)
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


class MLP(eqx.Module):
    layers: list

    def __init__(self, key):
        k1, k2, k3 = jax.random.split(key, 3)
        self.layers = [
            eqx.nn.Linear(8, 16, key=k1),
            jax.nn.relu,
            eqx.nn.Linear(16, 16, key=k2),
            jax.nn.relu,
            eqx.nn.Linear(16, 2, key=k3),
        ]

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def swish(x):
    return x * jax.nn.sigmoid(x)


class UserActs(eqx.Module):  # the user's own function in the list, twice
    layers: list

    def __init__(self, key):
        k1, k2 = jax.random.split(key)
        self.layers = [eqx.nn.Linear(8, 16, key=k1), swish, eqx.nn.Linear(16, 2, key=k2), swish]

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class NnxMLP(nnx.Module):
    def __init__(self, rngs):
        self.layers = nnx.List(
            [nnx.Linear(8, 16, rngs=rngs), jax.nn.gelu, nnx.Linear(16, 2, rngs=rngs)]
        )

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class LinenMLP(nn.Module):
    def setup(self):
        self.layers = [nn.Dense(16), nn.relu, nn.Dense(2)]

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def eqx_loss(model, x, y):
    pred = jax.vmap(model)(x)
    return -jnp.mean(jnp.take_along_axis(pred, y[:, None], axis=1))


def mlp_loss(model, x):
    return jnp.mean(jax.vmap(model)(x) ** 2)


def nnx_loss(model, x):
    return jnp.mean(model(x) ** 2)


FNS = [jnp.sin, jnp.cos, jnp.sin]


def plain(x):
    for f in FNS:
        x = f(x)
    return jnp.sum(x)


def _args(name):
    x8 = jnp.ones((4, 8))
    if name == "cnn":
        return eqx_loss, (CNN(jax.random.key(0)), jnp.ones((2, 1, 28, 28)), jnp.array([0, 3]))
    if name == "mlp":
        return mlp_loss, (MLP(jax.random.key(0)), x8)
    if name == "user":
        return mlp_loss, (UserActs(jax.random.key(0)), x8)
    if name == "nnx":
        return nnx_loss, (NnxMLP(nnx.Rngs(0)), x8)
    model = LinenMLP()
    return model.apply, (model.init(jax.random.key(0), x8), x8)


# model -> the groups under the model's root, in program order (modules and list functions)
EXPECTED = {
    "cnn": [
        "layers_0",
        "layers_1",
        "layers_2 (relu)",
        "layers_3 (ravel)",
        "layers_4",
        "layers_5 (sigmoid)",
        "layers_6",
        "layers_7 (relu)",
        "layers_8",
        "layers_9 (log_softmax)",
    ],
    "mlp": ["layers_0", "layers_1 (relu)", "layers_2", "layers_3 (relu)", "layers_4"],
    "user": ["layers_0", "layers_1 (swish)", "layers_2", "layers_3 (swish)"],
    "nnx": ["layers_0", "layers_1 (gelu)", "layers_2"],
    "linen": ["layers_0", "layers_1 (relu)", "layers_2"],
}


def _compile(name, backend, monkeypatch):
    monkeypatch.setenv("NBCOMPILE_CALL_CAPTURE", backend)
    fn, args = _args(name)
    c = nbcompile.compile(fn, *args, grad=name != "linen")
    assert c.stages.calls.backend == backend and c.stages.calls.complete
    return c


def _below_root(graph):
    """The groups one level below the model's root group, in program order."""
    groups = list(graph.groups)
    roots = [g for g in groups if g.label in ("CNN", "MLP", "UserActs", "NnxMLP", "LinenMLP")]
    assert roots, [g.label for g in groups]
    return [g.label for g in groups if g.parent == roots[0].id]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(EXPECTED))
def test_list_functions_are_named_by_their_place(name, backend, monkeypatch):
    c = _compile(name, backend, monkeypatch)
    assert _below_root(c.graph) == EXPECTED[name]
    functions = [label for label in EXPECTED[name] if "(" in label]
    kinds = {g.label: g.call for g in c.graph.groups}
    kind = "call" if name == "user" else "library"  # the user's function: a call of theirs
    assert all(kinds[f] == kind for f in functions), kinds
    assert not any(
        g.label.startswith(("layer#", "swish#")) or g.label == "layer" for g in c.graph.groups
    )
    # the name reaches the program (name stacks, XLA's op names) and the backward twins
    for label in functions:
        assert label in c.lowered.as_text(debug_info=True), label
    if name != "linen":
        twins = {g.label for g in c.grad.analysis.traced_graph.groups}
        assert {f"{f} (backward)" for f in functions} <= twins, sorted(twins)


def test_a_loop_over_functions_outside_a_model_keeps_its_names(monkeypatch):
    monkeypatch.setenv("NBCOMPILE_CALL_CAPTURE", BACKENDS[-1])
    c = nbcompile.compile(plain, jnp.ones(3))
    labels = [g.label for g in c.graph.groups if g.call == "library"]
    assert labels[:3] == ["f", "f#2", "f#3"], labels


@pytest.mark.skipif(len(BACKENDS) < 2, reason="sys.monitoring needs Python >= 3.12")
def test_both_backends_name_the_list_the_same(monkeypatch):
    got = {
        b: [(g.id, g.label, g.parent, g.call) for g in _compile("mlp", b, monkeypatch).graph.groups]
        for b in BACKENDS
    }
    assert got["frames"] == got["monitoring"]
