"""``--static`` with every option that calls the program (issue 28 §2).

A function with a static callable argument (``act=jax.nn.gelu``, as Flax and Equinox examples
pass activations) and a static int in the middle of the signature: each measurement must call
the program with the static values exactly as the compile did (not flattened into the
program's inputs, not passed to a ``Compiled``), and give the same numbers as the program.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nbcompile

from .helpers import run

SETUP = """
import jax, jax.numpy as jnp, numpy as np
rng = np.random.default_rng(0)
w = jnp.asarray(rng.normal(size=(8, 8)) / 4, jnp.float32)
x = jnp.asarray(rng.normal(size=(4, 8)), jnp.float32)
"""

POSITIONAL = """%%compile --static act,depth -q {opts}
def mlp(x, depth, w, act):
    h = x
    for _ in range(depth):
        h = act(h @ w)
    return h
mlp(x, 2, w, jax.nn.gelu)
"""

KEYWORD = """%%compile --static act -q {opts}
def layer(w, x, *, act):
    return act(x @ w)
layer(w, x, act=jax.nn.gelu)
"""

OPTIONS = ["--bench", "--debug", "--profile 2", "--ablate", "--memory", "--freeze {tmp}/m.nbc"]


def _reference(ns: dict, keyword: bool) -> jax.Array:
    act = jax.nn.gelu
    if keyword:
        return act(ns["x"] @ ns["w"])
    return act(act(ns["x"] @ ns["w"]) @ ns["w"])


@pytest.fixture
def ip(shell):
    shell.reset(new_session=False)
    res = shell.run_cell(SETUP)
    assert res.success, res.error_in_exec
    return shell


@pytest.mark.profiler
@pytest.mark.parametrize("keyword", [False, True], ids=["positional", "keyword"])
@pytest.mark.parametrize("opts", OPTIONS)
def test_every_measurement_uses_the_static_arguments_as_compiled(ip, tmp_path, opts, keyword):
    opts = opts.format(tmp=tmp_path)
    cell = KEYWORD if keyword else POSITIONAL
    res = run(ip, cell.format(opts=opts))
    assert res.success, res.error_in_exec
    c = nbcompile.last()
    want = np.asarray(_reference(ip.user_ns, keyword))
    assert len(c.call_form.leaves()) == 2 == len(c.jaxpr.jaxpr.invars)
    if "--bench" in opts:
        assert c.bench.compiled.median > 0 and c.bench.compiled_kernels
        assert c.bench.eager_kernels and c.bench.op_by_op_kernels
    if "--debug" in opts:
        assert not c.debug.stopped
        np.testing.assert_allclose(np.asarray(c.debug.outputs[0]), want, rtol=1e-5, atol=1e-6)
    if "--profile" in opts:
        assert c.profile.source == "measured" and c.profile.kernels
    if "--ablate" in opts:
        assert not [v.error for v in c.ablation.variants if v.error]
        assert c.ablation.variants[0].time is not None, c.ablation.notes
    if "--memory" in opts:
        assert c.memory_map_if_computed is not None
    if "--freeze" in opts:
        # every dynamic argument but the last is stored (weights), the last is the input
        model = nbcompile.load(str(tmp_path / "m.nbc"))
        got = model(ip.user_ns["x" if keyword else "w"])
        np.testing.assert_allclose(np.asarray(jax.tree.leaves(got)[0]), want, rtol=1e-5)


def test_bench_of_a_static_function_argument_through_the_api():
    from nbcompile.measure import bench
    from nbcompile.measure._calls import CallForm

    w, x = jnp.ones((4, 4)), jnp.ones((2, 4))

    def f(w, x, act):
        return act(x @ w)

    form = CallForm.of((w, x, jax.nn.relu), static_argnums=(2,))
    result = bench(f, form.args, form=form, op_by_op=False, max_seconds=0.5)
    assert result.compiled.median > 0 and result.eager_kernels
