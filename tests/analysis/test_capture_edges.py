"""The call capture's backends agree where calls end in unusual ways (issue 39 item 3).

The Python 3.13 backend (``capture/_events.py``) keeps the calls' labels in JAX's name-stack
context and takes each off as its call ends: a user function's return, yield or exception; a
library call's own return event (``C_RETURN`` for anything but a Python function, the callee's
``PY_RETURN``/``PY_UNWIND`` for one). A label left on too long would name equations the user's
code made after the call (``y * 2`` after ``jnp.tanh(x)`` named ``tanh``); one taken off too
early would leave the call's own equations unnamed. Each model here ends calls in one such way,
and both backends must record the same calls and stamp every equation (nested programs
included) with the same name stack as the traceback backend (``_frames.py``), which reads the
running frames at each equation instead.

The models are this file's own functions: a test file is the user's code.
"""

from __future__ import annotations

import sys

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

from nbcompile.capture import _events
from nbcompile.capture.calls import record_calls
from nbcompile.stages import make_jitted

pytestmark = pytest.mark.skipif(
    sys.version_info < (3, 12), reason="one backend only before Python 3.12"
)

X = jnp.asarray(np.linspace(-1.0, 1.0, 8, dtype=np.float32))


def caught(x):
    try:
        y = jnp.reshape(x, (3, 3))  # a library call that raises (8 elements)
    except TypeError:
        y = x
    return jnp.sin(y) * 2.0  # after it: not the reshape's


def raising(x):
    if x.shape[0] > 4:
        raise ValueError("too long")
    return x


def unwinds(x):
    try:
        x = raising(x * 3.0)  # a user function that raises: its frame unwinds
    except ValueError:
        x = jnp.cos(x)
    return x + 1.0


def halves(x):
    for k in range(3):
        yield jnp.tanh(x) * k  # a generator of the user's: yields and resumes


def generator(x):
    total = x
    for v in halves(x):  # resumed from the loop
        total = total + v
    return total - 1.0


def summed(x):
    return sum(halves(x)) - 1.0  # resumed by a builtin, which adds with a library method


class Scale:
    def __init__(self, k):
        self.k = k

    def __call__(self, x):  # the user's own __call__: ``s(x)`` is a call of it
        return jnp.exp(x) * self.k


def callable_object(x):
    s = Scale(2.0)
    return s(x) + s(x * 0.5)


def scoped(x):
    y = jnp.tanh(x)
    with jax.named_scope("head"):  # a scope entered right after a library call returned
        y = y * 3.0
        y = jnp.sin(y)
    return y - 1.0


def mapped(x):
    tree = {"a": x, "b": x * 2.0}
    out = jax.tree.map(lambda v: jnp.tanh(v) + 1.0, tree)  # calls back a lambda
    return out["a"] + out["b"]


def grads(x):
    def loss(v):
        return jnp.sum(jnp.tanh(v) ** 2)

    g = jax.grad(loss)(x)  # a transformation running the user's code
    return g * 2.0


def vmapped(x):
    def row(v):
        return jnp.dot(v, v)

    return jax.vmap(row)(x.reshape(2, 4)) + 1.0  # after the vmap: not the row's


MODELS = [caught, unwinds, generator, callable_object, scoped, mapped, grads, vmapped]


def _picture(fn, backend, monkeypatch):
    name = backend.split(",")[0]
    with monkeypatch.context() as patched:
        if backend != name:
            patched.setattr(_events, "available", lambda: False)
        jitted = make_jitted(fn)
        with record_calls(backend=name) as log:
            traced = jitted.trace(X)
    assert log.backend == name and log.complete
    stacks = []

    def visit(jaxpr):
        for eqn in jaxpr.eqns:
            stacks.append((eqn.primitive.name, str(eqn.source_info.name_stack)))
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                visit(sub)

    visit(traced.jaxpr.jaxpr)
    return {"calls": log.to_json(), "stacks": stacks}


@pytest.mark.parametrize("fn", MODELS, ids=[f.__name__ for f in MODELS])
def test_calls_end_where_the_traceback_backend_sees_them_end(fn, monkeypatch):
    frames = _picture(fn, "frames", monkeypatch)
    monitoring = _picture(fn, "monitoring", monkeypatch)
    assert monitoring["calls"] == frames["calls"]
    assert monitoring["stacks"] == frames["stacks"]
    if _events.available():  # 3.12's backend, where 3.13 runs the other one
        assert _picture(fn, "monitoring, 3.12's", monkeypatch) == frames


def test_an_equation_after_a_library_call_is_not_in_it(monkeypatch):
    got = dict(_picture(caught, "monitoring", monkeypatch)["stacks"])
    assert got["sin"] == "sin" and got["mul"] == ""  # neither under reshape
    scoped_stacks = _picture(scoped, "monitoring", monkeypatch)["stacks"]
    assert ("mul", "head") in scoped_stacks and ("sin", "head/sin") in scoped_stacks
    assert ("sub", "") in scoped_stacks  # after the scope and the tanh: the function's own
    vm = _picture(vmapped, "monitoring", monkeypatch)["stacks"]
    assert ("add", "") in vm and any(s.startswith("row#1") for _p, s in vm)


def test_each_resumption_of_a_generator_is_a_call(monkeypatch):
    # as the traceback backend sees it: a generator's frame runs from each resumption to its
    # next yield, and that run is the call (the frame was not running in between)
    pic = _picture(generator, "monitoring", monkeypatch)
    calls = [c["label"] for c in pic["calls"] if c["kind"] == "call"]
    assert calls == ["halves#1", "halves#2", "halves#3"]
    assert [s for p, s in pic["stacks"] if p == "add"] == ["", "", ""]


@pytest.mark.skipif(not _events.available(), reason="the Python 3.13 backend")
def test_a_builtin_calling_back_library_code_is_one_call_as_written(monkeypatch):
    # ``sum(halves(x))``: the builtin resumes the user's generator (each run a call beside
    # it, of the caller's) and adds with the arrays' ``__add__``. The 3.13 backend sees the
    # one call the user wrote: every addition is in ``sum``. The traceback backends, which see
    # frames, not calls of C functions, make each ``__add__`` frame a call of its own
    # (``sum``, ``sum#2``, ``sum#3``); the groups differ in that only (docs/view.md).
    new = _picture(summed, "monitoring", monkeypatch)
    old = _picture(summed, "frames", monkeypatch)
    assert [s for p, s in new["stacks"] if p == "add"] == ["sum", "sum", "sum"]
    assert [s for p, s in old["stacks"] if p == "add"] == ["sum", "sum#2", "sum#3"]
    assert [s for p, s in new["stacks"] if p != "add"] == [
        s for p, s in old["stacks"] if p != "add"
    ]
    labels = [(c["label"], c["kind"], c["parent"]) for c in new["calls"]]
    assert labels == [
        ("halves#1", "call", "summed"),
        ("tanh", "library", "halves#1"),
        ("sum", "library", "summed"),
        ("halves#2", "call", "summed"),
        ("tanh", "library", "halves#2"),
        ("halves#3", "call", "summed"),
        ("tanh", "library", "halves#3"),
    ]


def broken_inside(x):
    def body(c, _):
        c = jnp.tanh(c)
        if c.shape[0] == 8:
            raise RuntimeError("the user's bug, inside a scan inside a named scope")
        return c, None

    with jax.named_scope("outer"):
        return jax.lax.scan(body, x, None, length=3)[0]


@pytest.mark.parametrize("backend", ["frames", "monitoring"])
def test_a_trace_that_fails_leaves_jax_context_as_found(backend):
    from jax._src import source_info_util

    before = source_info_util._source_info_context.context
    jitted = make_jitted(broken_inside)
    with pytest.raises(RuntimeError, match="the user's bug"), record_calls(backend=backend):
        jitted.trace(X)
    assert source_info_util._source_info_context.context is before
    assert str(source_info_util.current_name_stack()) == ""
    # and the next trace is labelled afresh, with nothing of the failed one
    jitted = make_jitted(caught)
    with record_calls(backend=backend) as log:
        traced = jitted.trace(X)
    assert log.complete
    assert [str(e.source_info.name_stack) for e in traced.jaxpr.eqns][-2:] == ["sin", ""]


_SEEN: list[tuple[object, object]] = []


def stamps_twice(x):
    from jax._src import source_info_util

    first = source_info_util._source_info_context.context  # (attribute reads: no call)
    y = x * 2.0
    y = y + 1.0
    then = source_info_util._source_info_context.context
    _SEEN.append((first, then))
    return y


def caller_of_stamps(x):
    return stamps_twice(x) * 3.0


@pytest.mark.skipif(not _events.available(), reason="the events backend needs Python 3.13")
def test_jax_stamps_a_recorded_calls_later_equations_itself():
    """The events backend observes JAX's context only until the call running is recorded (its
    first equation): then JAX's plain ``SourceInfo``, with the same name stack, takes its place,
    and JAX stamps the call's other equations at its own cost (the capture row's target)."""
    from jax._src import source_info_util

    _SEEN.clear()
    with record_calls(backend="monitoring") as log:
        traced = make_jitted(caller_of_stamps).trace(X)
    assert log.complete
    ((first, then),) = _SEEN
    assert type(first) is _events._Observed  # the call's own context, before its first equation
    assert type(then) is source_info_util.SourceInfo  # JAX's own, after it
    assert then.name_stack.stack == first.name_stack.stack  # the same labels
    # and the equations are labelled as the traceback backend labels them
    names = [str(e.source_info.name_stack) for e in traced.jaxpr.eqns]
    assert names == ["stamps_twice#1", "stamps_twice#1", ""]
