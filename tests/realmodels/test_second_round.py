"""Found in a second round of real models (issue 14 §6): "eager would launch" counts what
op-by-op execution dispatches (as ``--bench`` replays it) or says "at least", and errors in the
user's own code are labelled as theirs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.ode import odeint
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

import nbcompile
from nbcompile.debug import Interpreter
from nbcompile.errors import NbcompileError
from nbcompile.magic import short_traceback


def replayed_dispatches(fn, *args) -> int:
    """Primitives dispatched running ``fn`` op by op: what --bench counts for its eager side."""
    count = 0

    def hook(_nid, _eqn, _invals, _outvals, _it, leaf):
        nonlocal count
        count += int(leaf)

    closed = jax.make_jaxpr(fn)(*args)
    Interpreter(hook).run(closed, jax.tree.leaves(args))
    return count


def eager_figure(fn, *args) -> tuple[int, bool, str]:
    c = nbcompile.compile(fn, *args)
    s = c.summary()
    return s["eager_kernels"], s["eager_kernels_exact"], repr(c)


def fori(x):
    return jax.lax.fori_loop(0, 50, lambda i, h: jnp.tanh(h * 1.01 + i), x)


def nested_jit(x):
    inner = jax.jit(lambda y: jnp.sin(y) * 2.0 + jnp.cos(y))
    return inner(x) + inner(x * 3.0)


def branches(x):
    return jax.lax.cond(x.sum() > 0, lambda y: jnp.sin(y) + 1.0, lambda y: jnp.cos(y) - 1.0, x)


@pytest.mark.parametrize("fn", [fori, nested_jit, branches], ids=lambda f: f.__name__)
def test_eager_count_is_what_op_by_op_execution_dispatches(fn):
    x = jnp.linspace(-1.0, 1.0, 8)
    count, exact, text = eager_figure(fn, x)
    assert exact and count == replayed_dispatches(fn, x), (count, replayed_dispatches(fn, x))
    assert f"eager (op by op) would launch {count}" in text


def decay(y, t, k):
    return -k * y + jnp.sin(t)


def ode_solve(y0):
    return odeint(decay, y0, jnp.linspace(0.0, 1.0, 3), 0.5, rtol=1e-4, atol=1e-4)[-1]


def halve_until_small(x):
    return jax.lax.while_loop(lambda h: jnp.max(jnp.abs(h)) > 1e-3, lambda h: h * 0.5, x)


@pytest.mark.parametrize("fn", [ode_solve, halve_until_small], ids=lambda f: f.__name__)
def test_eager_count_of_a_while_loop_is_a_labelled_lower_bound(fn):
    x = jnp.ones((4,))
    count, exact, text = eager_figure(fn, x)
    dispatched = replayed_dispatches(fn, x)
    assert not exact and 0 < count < dispatched, (count, dispatched)
    assert f"eager (op by op) would launch at least {count}" in text


def test_eager_count_of_shard_map_is_a_labelled_lower_bound():
    mesh = Mesh(np.array(jax.devices()[:1]), ("x",))
    fn = jax.jit(
        jax.shard_map(
            lambda a: jax.lax.psum(jnp.sin(a), "x"), mesh=mesh, in_specs=P("x"), out_specs=P()
        )
    )
    count, exact, text = eager_figure(fn, jnp.arange(8.0))
    assert not exact and count >= 1 and "at least" in text


@pytest.fixture
def ip(shell):
    shell.reset(new_session=False)
    assert shell.run_cell("import jax, jax.numpy as jnp\nx = jnp.ones(3)").success
    return shell


def label_of(ip, cell: str) -> str:
    res = ip.run_cell(cell)
    assert isinstance(res.error_in_exec, NbcompileError), repr(res.error_in_exec)
    return short_traceback(res.error_in_exec)[0].splitlines()[0]


def test_an_undefined_name_is_labelled_as_the_users_code(ip):
    first = label_of(ip, "%%compile -q\ndef f(x):\n    return x * undefined_name\nf(x)\n")
    assert first.startswith("NameError (raised by your code)"), first
    ip.run_cell("def g(x):\n    return x + not_defined_either\n")  # defined in an earlier cell
    first = label_of(ip, "%%compile -q\ng(x)\n")
    assert first.startswith("NameError (raised by your code)"), first


def test_an_error_raised_inside_jax_keeps_its_label(ip):
    first = label_of(ip, "%%compile -q\ndef h(x):\n    return jnp.dot(x, jnp.ones((4, 2)))\nh(x)\n")
    assert first.startswith("TypeError (raised by JAX/XLA)"), first
