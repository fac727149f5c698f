"""Freezing writes what was traced: a Flax NNX model frozen in training mode keeps its dropout
and batch statistics, so its freeze result says so, naming the layers; after ``model.eval()``
it says nothing (tutorial 06 teaches both)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import nbcompile

nnx = pytest.importorskip("flax.nnx")


class Net(nnx.Module):
    def __init__(self, rngs):
        self.lin = nnx.Linear(3, 8, rngs=rngs)
        self.bn = nnx.BatchNorm(8, rngs=rngs)
        self.drop = nnx.Dropout(0.5, rngs=rngs)

    def __call__(self, x):
        return self.drop(jax.nn.relu(self.bn(self.lin(x))))


def test_a_model_frozen_in_training_mode_gets_a_note_naming_its_training_layers(tmp_path):
    net, x = Net(nnx.Rngs(0)), jnp.ones((4, 3))
    net.train()
    trained = nbcompile.compile(net, x).freeze(str(tmp_path / "train.nbc"))
    (note,) = trained.notes
    assert "bn (BatchNorm)" in note and "drop (Dropout)" in note and "model.eval()" in note
    assert "note: frozen in training mode" in trained.text()
    assert trained.to_json()["notes"] == [note]
    net.eval()
    inference = nbcompile.compile(net, x).freeze(str(tmp_path / "eval.nbc"))
    assert inference.notes == () and "note:" not in inference.text()


def test_a_model_without_training_layers_gets_no_note(tmp_path):
    lin = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    result = nbcompile.compile(lin, jnp.ones((4, 3))).freeze(str(tmp_path / "lin.nbc"))
    assert result.notes == ()
