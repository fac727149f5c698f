"""The user's calls as groups (issue 26, item 1; SPEC §8.1), through a real IPython shell.

A 10-layer plain-JAX model: ``block(p, x)`` is defined in an earlier cell and called from a
``for p in params:`` loop in the ``%%compile`` cell. Every call is its own group, numbered
(``block#1`` … ``block#10``), though all ten come from the same loop line; ``jax.nn.gelu`` is
one collapsed library group named as the user wrote it; fusions name the calls their ops came
from; with ``--grad`` every block pairs with its backward group and the residuals between them.
Library models keep their module groups (no call labels in module paths).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import nbcompile
from nbcompile.analysis.traced import walk_order
from nbcompile.capture.calls import record_calls

from ..helpers import run, setup

BLOCK = """
def block(p, x):
    h = jax.nn.gelu(x @ p["w1"])
    v = h.var(axis=-1, keepdims=True)
    return x + (h / jnp.sqrt(v + 1.0)) @ p["w2"]

rng = np.random.default_rng(0)
layers = [
    {"w1": jnp.asarray(rng.normal(size=(16, 32)) * 0.1, jnp.float32),
     "w2": jnp.asarray(rng.normal(size=(32, 16)) * 0.1, jnp.float32)}
    for _ in range(10)
]
xs = jnp.asarray(rng.normal(size=(8, 16)), jnp.float32)
ys = jnp.asarray(rng.normal(size=(8, 16)), jnp.float32)
"""

LOSS = """%%compile -q -f{opts}
def loss(params, x, y):
    for p in params:
        x = block(p, x)
    return jnp.mean((x - y) ** 2)
loss(layers, xs, ys)
"""

BLOCKS = [f"block#{k}" for k in range(1, 11)]


@pytest.fixture
def ip(shell):
    setup(shell)
    assert run(shell, BLOCK).success
    return shell


def _children(graph, parent):
    return [g for g in graph.groups if g.parent == parent]


def _first_view(graph):
    """Boxes of the first Graph view: top-level groups (collapsed) and top-level ops."""
    used = {n.group for n in graph.nodes}
    live = {g.id for g in graph.groups if g.id in used}
    by_id = {g.id: g for g in graph.groups}
    for gid in list(live):  # a group is drawn when it or a group inside it holds nodes
        while by_id[gid].parent is not None:
            gid = by_id[gid].parent
            live.add(gid)
    tops = [g for g in graph.groups if g.parent is None and g.id in live]
    ops = [n for n in graph.nodes if n.group is None and n.kind in ("op", "call")]
    return tops, ops


def test_each_call_from_the_loop_is_its_own_numbered_group(ip):
    res = run(ip, LOSS.format(opts=""))
    assert res.success, res.error_in_exec
    c = nbcompile.last()
    graph = c.graph
    tops, ops = _first_view(graph)
    assert [g.label for g in tops if g.call == "call"] == BLOCKS
    assert len(tops) + len(ops) <= 25
    for top in tops:
        if top.label.startswith("block#"):
            inner = {g.label: g for g in _children(graph, top.id)}
            assert inner["gelu"].call == "library"  # one box, named as the user wrote it
            assert "var" in inner and "_var" not in inner  # never JAX's private name
            gelu = [n.op for n in graph.nodes if n.group == inner["gelu"].id and n.kind == "op"]
            assert "tanh" in gelu  # expandable to its primitives
    # call labels stay out of module paths
    assert not any("#" in n.path for n in graph.nodes)
    calls = {n.extra.get("calls") for n in graph.nodes}
    assert "block#3/gelu" in calls
    # the kernels name the calls their ops came from
    functions = {f for fusion in c.fusions for f in fusion.functions}
    assert {f.split("/")[0] for f in functions} >= set(BLOCKS)
    assert all("#" not in m for fusion in c.fusions for m in fusion.modules)


def test_gradient_pairs_each_block_with_its_backward_group(ip):
    res = run(ip, LOSS.format(opts=" --grad"))
    assert res.success, res.error_in_exec
    c = nbcompile.last()
    pairs = {fwd: (bwd, nbytes) for fwd, bwd, nbytes in c.gradient.pairs}
    for name in BLOCKS:
        bwd, nbytes = pairs[name]
        assert bwd == f"{name} (backward)"
        assert nbytes > 0
    assert [p[0] for p in c.gradient.pairs if p[0] in BLOCKS] == BLOCKS  # program order
    graph = c.grad.analysis.traced_graph
    labels = {g.label for g in graph.groups if g.call == "call"}
    assert labels >= set(BLOCKS) | {f"{b} (backward)" for b in BLOCKS}
    memory = c.memory_map  # the bytes at the peak, per call
    assert any(k.split("/")[0] in BLOCKS for k in memory.by_function), memory.by_function
    assert not any("#" in (b.module or "") for b in memory.at_peak)


def _block_of(path):
    return path.split("/")[0].removesuffix(" (backward)")


def test_compiled_kernels_carry_their_calls_and_only_their_own(ip):
    res = run(ip, LOSS.format(opts=" --grad"))
    assert res.success, res.error_in_exec
    c = nbcompile.last()
    for analysis in (c.analysis, c.grad.analysis):
        known = analysis.kernel_functions
        nodes = [n for n in analysis.compiled_graph.nodes if n.label in known]
        assert len(nodes) == len(known) > 0
        for node in nodes:  # unfused kernels (dots) too, not only fusions
            assert node.extra.get("calls") == known[node.label], node.label
        # a constant shared by every block keeps block#1's name: it must not make a kernel
        # look like it spans two blocks (each block's kernels only name their own block)
        for fusion in analysis.fusions:
            blocks = {_block_of(p) for p in fusion.functions} & set(BLOCKS)
            assert len(blocks) <= 1, (fusion.name, fusion.functions)
    # the step's matrix products: unfused dots, or YNNPACK library fusions (jaxlib 0.12.1
    # hands XLA:CPU's remaining dots to YNNPACK), each named after its call
    grad = c.grad.analysis
    library = {f.name for f in grad.fusions if "dot" in f.ops}
    dots = [
        n for n in grad.compiled_graph.nodes if n.extra.get("opcode") == "dot" or n.label in library
    ]
    assert len(dots) >= 20 and all(n.extra.get("calls") for n in dots), len(dots)
    spans = [f.functions for f in c.grad.analysis.fusions if "mean (backward)" in f.functions]
    assert any("block#10" in fs for fs in spans)  # a fusion that really spans two calls


def test_the_same_function_called_twice_on_one_line_is_two_groups(ip):
    cell = """%%compile -q -f
def twice(params, x):
    return block(params[0], block(params[0], x))
twice(layers, xs)
"""
    assert run(ip, cell).success
    graph = nbcompile.last().graph
    assert sorted(g.label for g in graph.groups if g.call == "call") == ["block#1", "block#2"]


NNX = """from flax import nnx
class Block(nnx.Module):
    def __init__(self, rngs):
        self.dense = nnx.Linear(16, 16, rngs=rngs)
    def __call__(self, x):
        return jax.nn.relu(self.dense(x))
class Model(nnx.Module):
    def __init__(self, rngs):
        self.blocks = nnx.List([Block(rngs) for _ in range(3)])
    def __call__(self, x):
        for b in self.blocks:
            x = b(x)
        return x
model = Model(nnx.Rngs(0))
"""

EQX = """import equinox as eqx
class Block(eqx.Module):
    dense: eqx.nn.Linear
    def __init__(self, key):
        self.dense = eqx.nn.Linear(16, 16, key=key)
    def __call__(self, x):
        return jax.nn.relu(self.dense(x))
class Model(eqx.Module):
    blocks: list
    def __init__(self, key):
        self.blocks = [Block(k) for k in jax.random.split(key, 3)]
    def __call__(self, x):
        for b in self.blocks:
            x = b(x)
        return x
model = Model(jax.random.key(0))
"""


@pytest.mark.parametrize(("library", "code", "arg"), [("nnx", NNX, "xs"), ("eqx", EQX, "xs[0]")])
def test_library_models_still_group_by_their_modules(ip, relaxed_dtypes, library, code, arg):
    pytest.importorskip("flax" if library == "nnx" else "equinox")
    if library == "nnx":
        from flax import nnx

        if not hasattr(nnx, "List"):
            code = code.replace("nnx.List(", "(")
    assert run(ip, code).success
    res = run(ip, f"%%compile -q -f\nmodel({arg})\n")
    assert res.success, res.error_in_exec
    graph = nbcompile.last().graph
    paths = {n.path for n in graph.nodes if n.kind == "op"}
    assert any("blocks" in p and "dense" in p for p in paths), paths
    assert not any("#" in p for p in paths)
    modules = {g.label for g in graph.groups if g.kind in ("scope", "module")}
    assert any("blocks" in m for m in modules), modules
    assert not any(g.call == "call" for g in graph.groups)  # module methods are not calls


def _block(p, x):
    unused = jnp.sin(x) * 3.0  # noqa: F841  (dead code stays as JAX leaves it)
    return jnp.tanh(x @ p) + x


def _loss(ps, x):
    for p in ps:
        x = _block(p, x)
    return jnp.sum(x**2)


def test_recording_changes_only_names_not_the_program():
    ps = [jnp.full((4, 4), 0.1, jnp.float32)] * 3
    x = jnp.ones((2, 4), jnp.float32)

    def trace(record):
        fn = jax.value_and_grad(_loss)

        def step(ps, x):  # a fresh function: JAX's trace cache must not answer
            return fn(ps, x)

        with record_calls(record) as log:
            traced = jax.jit(step).trace(ps, x)
        return traced, log

    plain, _ = trace(False)
    named, log = trace(True)
    assert [e.primitive.name for e in walk_order(named.jaxpr)] == [
        e.primitive.name for e in walk_order(plain.jaxpr)
    ]
    labels = [c.label for c in log.calls if c.kind == "call"]
    assert labels == ["_loss#1", "_block#1", "_block#2", "_block#3"]
    stacks = {str(e.source_info.name_stack) for e in walk_order(named.jaxpr)}
    assert any("transpose(" in s and "_block#3" in s for s in stacks)
    out_plain = jax.jit(lambda ps, x: jax.value_and_grad(_loss)(ps, x))(ps, x)
    out_named = named.lower().compile()(ps, x)
    for a, b in zip(jax.tree.leaves(out_plain), jax.tree.leaves(out_named), strict=True):
        assert jnp.array_equal(a, b)


def test_the_report_leaves_out_call_paths_the_view_reads_elsewhere(ip):
    """A traced node's call path is its group's, a fusion node's its fusion's ``functions``:
    the report carries neither twice (a fifth of the displayed bytes at GPT-2 scale), while an
    unfused kernel keeps its own and the view still finds every kernel's calls."""
    res = run(ip, LOSS.format(opts=" --grad"))
    assert res.success, res.error_in_exec
    c = nbcompile.last()
    report = c.report()
    for name in ("traced", "gradient"):
        assert not any("calls" in n for n in report["graphs"][name]["nodes"]), name
    for name, fusions in (("compiled", "fusions"), ("gradient_compiled", "gradient_fusions")):
        by_name = {f["name"]: f.get("functions") for f in report[fusions]}
        analysis = c.analysis if name == "compiled" else c.grad.analysis
        known = analysis.kernel_functions
        for n in report["graphs"][name]["nodes"]:
            if n["label"] not in known:
                continue
            seen = n.get("calls") or by_name.get(n.get("fusion"))
            assert seen == known[n["label"]], n["label"]
            if n.get("fusion") in by_name and by_name[n["fusion"]] == known[n["label"]]:
                assert "calls" not in n, n["label"]
