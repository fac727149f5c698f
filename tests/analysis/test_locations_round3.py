"""Locations of library models called directly and of unfused kernels (issue 28, items 6 and
7), through a real IPython shell with the models defined in earlier cells.

* ``lin(x)`` on an ``eqx.nn.Linear`` / ``nnx.Linear``: no frame of the program is the user's, so
  the ops are located at the model's own code (the library's ``__call__``) and, in the compiling
  cell, at the call's visible line; never at IPython's generated
  ``get_ipython().run_cell_magic(...)`` line, which is what called nbcompile, not the program.
* A UNet-style conv block: XLA:CPU's layout pass rewrites the ``convolution`` without metadata;
  it is not fused, so it takes the sources of its neighbours, labelled inferred.
"""

from __future__ import annotations

import pytest

import nbcompile

from ..helpers import run, setup

MODELS = """import equinox as eqx
from flax import nnx
lin = eqx.nn.Linear(64, 32, key=jax.random.key(0))
nlin = nnx.Linear(64, 32, rngs=nnx.Rngs(0))
v = jnp.ones((64,), jnp.float32)
vb = jnp.ones((4, 64), jnp.float32)
"""

# A residual conv block after the UNet of Equinox's score-based diffusion example
# (patrick-kidger/equinox, examples/score_based_diffusion.ipynb): conv 3x3 -> group norm ->
# SiLU -> conv 3x3, plus the input; re-implemented here at a small size.
CONV_BLOCK = """import equinox as eqx
class ResBlock(eqx.Module):
    conv1: eqx.nn.Conv2d
    norm: eqx.nn.GroupNorm
    conv2: eqx.nn.Conv2d
    def __init__(self, channels, key):
        k1, k2 = jax.random.split(key)
        self.conv1 = eqx.nn.Conv2d(channels, channels, 3, padding=1, key=k1)
        self.norm = eqx.nn.GroupNorm(4, channels)
        self.conv2 = eqx.nn.Conv2d(channels, channels, 3, padding=1, key=k2)
    def __call__(self, x):
        h = jax.nn.silu(self.norm(self.conv1(x)))
        return x + self.conv2(h)
block = ResBlock(8, jax.random.key(1))
image = jnp.ones((8, 16, 16), jnp.float32)
"""


@pytest.fixture
def ip(shell, relaxed_dtypes):
    return setup(shell)


def _generated_line(analysis, count):
    """Locations that point at the line IPython generated for the magic cell."""
    return [loc for loc in analysis.located if loc.cell == count and loc.line == 1]


@pytest.mark.parametrize("model", ["lin(y)", "nlin(yb)"])
def test_a_library_model_called_directly_is_located_at_its_code_and_the_call(ip, model):
    assert run(ip, MODELS).success
    count = ip.execution_count
    arg = "v" if model.endswith("(y)") else "vb"
    res = run(ip, f"%%compile -q -f\ny{'b' if arg == 'vb' else ''} = {arg}\n{model}\n")
    assert res.success, res.error_in_exec
    c = nbcompile.last()
    analysis = c.analysis
    assert c.fusions and all(f.source_lines == [3] for f in c.fusions), [
        (f.name, f.source_lines) for f in c.fusions
    ]
    assert set(analysis.lines) == {3}, analysis.lines
    assert analysis.lines[3]["cost_share"] > 0.99
    assert not _generated_line(analysis, count), list(analysis.located)
    library = "equinox/nn/_linear.py" if model.startswith("lin") else "flax/nnx/nn/linear.py"
    labels = [loc.label for loc in analysis.located]
    assert labels and all(label.startswith(library) for label in labels), labels


def test_an_unfused_convolution_takes_its_neighbours_lines_labelled_inferred(ip):
    count = ip.execution_count
    assert run(ip, CONV_BLOCK).success
    res = run(
        ip,
        "%%compile -q -f\ndef denoise(block, image):\n    return block(image)\n"
        "denoise(block, image)\n",
    )
    assert res.success, res.error_in_exec
    c = nbcompile.last()
    graph = c.analysis.compiled_graph
    convs = [n for n in graph.nodes if n.extra.get("opcode") == "convolution"]
    assert convs, "XLA fused every convolution: nothing to infer"
    for node in convs:
        lines, locations = c.analysis.kernel_sites[node.label]
        assert locations and node.extra.get("lines_inferred") is True, node.label
        assert all(loc.label.startswith(f"In [{count}] line ") for loc in locations), locations
        assert node.location is not None and lines == [3]


@pytest.mark.parametrize(
    ("op_name", "path"),
    [
        ("jit(f)/attn/bthd,bshd->bhts/dot_general", "attn"),
        ("jit(f)/while/body/closed_call/mlp/cos", "mlp"),
        ("jit(f)/while/body/closed_call/cos", None),
        ("jit(f)/cond/branch_1_fun/sin", None),
        ("jit(f)/checkpoint/Block/exp", "Block"),
        ("jit(f)/MLP/body/dense/dot_general", "MLP/body/dense"),  # a user module named body
    ],
)
def test_module_paths_drop_the_scopes_jax_made(op_name, path):
    """Issue 28 item 11: einsum subscripts and JAX's control-flow scopes are not modules."""
    from nbcompile.analysis.compiled import _module_path
    from nbcompile.capture.models import scope_path

    assert _module_path(op_name) == path
    assert scope_path(op_name.rsplit("/", 1)[0].removeprefix("jit(f)")) == (path or "")
