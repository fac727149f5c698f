"""The picture a person would draw of a library model (issue 26; SPEC §8.1): the first Graph
view names the model's layers, and with ``--grad`` each layer's module group pairs with its
``(backward)`` group (``c.gradient.pairs``, with the bytes of the residuals between them), so
the Gradient view draws ``first_conv (backward)`` facing ``first_conv``. One re-implemented
example model per library (``_cases_*.py``: Flax NNX, Flax Linen, Equinox, Keras), compiled as
a notebook user does."""

from __future__ import annotations

import pytest

from nbcompile.report.svg import graph_scene

from ._cases_equinox import CASES as EQUINOX
from ._cases_flax import CASES as FLAX
from ._cases_keras import CASES as KERAS
from ._helpers import compile_cell, use

BY_NAME = {case.name: case for case in [*FLAX, *EQUINOX, *KERAS]}
BACKWARD = " (backward)"

pytestmark = [
    pytest.mark.filterwarnings("ignore:'.value' access is now deprecated"),
    pytest.mark.filterwarnings("ignore:When `eqx.nn.BatchNorm:UserWarning"),
]

#: case -> the layers (module groups) the first Graph view names and the gradient pairs
LAYERS = {
    "nnx_mnist_tutorial": {"first_conv", "first_norm", "second_conv", "second_norm", "logits"},
    "linen_mnist_cnn": {"Conv_0", "Conv_1", "Dense_0", "Dense_1"},
    "eqx_mnist_cnn": {"stack_0", "stack_1", "stack_4", "stack_6", "stack_8"},
    "keras_mnist_convnet": {"conv2d", "max_pooling2d", "conv2d_1", "flatten", "dense"},
}


def _drawn(scene):
    """Label -> box of every group the scene draws (open or collapsed)."""
    return {b.group.label: b for b in scene.boxes.values() if b.group is not None}


@pytest.mark.parametrize("name", list(LAYERS))
def test_layers_are_named_and_face_their_backward_groups(shell, relaxed_dtypes, name):
    case = BY_NAME[name]
    use(shell, case)
    c = compile_cell(shell, f"--grad {case.grad}", case.loss)
    layers = LAYERS[name]
    report = c.report()
    _pg, first = graph_scene(report["graphs"]["traced"], report)
    assert layers <= set(_drawn(first)), sorted(_drawn(first))
    # no module group of the forward program is drawn as a collapsed library call
    assert not any(g.call == "library" and g.label in layers for g in c.graph.groups)

    pairs = {f: (b, nbytes) for f, b, nbytes in c.gradient.pairs}
    for layer in layers:
        assert pairs[layer][0] == layer + BACKWARD, (layer, c.gradient.pairs)
    assert sum(1 for _b, nbytes in pairs.values() if nbytes > 0) >= 2, c.gradient.pairs
    assert any(pairs[layer][1] > 0 for layer in layers) or name == "linen_mnist_cnn"

    # the Gradient view: each layer's backward group drawn, to the right of its forward group
    _pg, scene = graph_scene(report["graphs"]["gradient"], report)
    drawn = _drawn(scene)
    for layer in layers:
        f, b = drawn[layer], drawn[layer + BACKWARD]
        assert b.x >= f.x + f.w, (layer, f.x, f.w, b.x)
    # a backward op of a layer sits in that layer's backward group, never in its forward one
    graph = c.grad.analysis.traced_graph
    by_id = {g.id: g for g in graph.groups}
    for node in graph.nodes:
        g = by_id.get(node.group or "")
        if node.kind == "op" and g is not None and g.label in layers:
            assert node.phase != "backward", (g.label, node.op)
