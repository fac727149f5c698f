"""A user function called 10^5 times while tracing (issue 41 item 2): the call capture keeps at
most ``MAX_CALLS`` calls, then stops as a broken recording does, and says so.

Bounded: the calls so far keep their groups (``step#1`` …), later equations keep JAX's own
names, ``CallLog.capped`` is the number kept and the compilation carries a note saying what was
not grouped. The program and its numerics are those of a plain trace. The small cases lower the
cap; the slow one runs 10^5 calls at the real cap.

The model is this test file's own functions: a test file is the user's code.
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nbcompile
from nbcompile.capture import _record
from nbcompile.capture.calls import record_calls
from nbcompile.stages import make_jitted

BACKENDS = ["frames"] + (["monitoring"] if sys.version_info >= (3, 12) else [])
X = jnp.linspace(-1.0, 1.0, 4, dtype=jnp.float32)


def step(x):
    return jnp.sin(x) * 0.5 + 1.0


def make_loop(n):
    def loop(x):
        for _ in range(n):
            x = step(x)
        return x

    return loop


def _trace(fn, enabled=True, backend=None):
    with record_calls(enabled=enabled, backend=backend) as log:
        traced = make_jitted(fn).trace(X)
    return log, traced


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_recording_keeps_at_most_max_calls_and_says_so(monkeypatch, backend):
    monkeypatch.setattr(_record, "MAX_CALLS", 20)
    loop = make_loop(60)
    log, traced = _trace(loop, backend=backend)
    assert log.backend == backend
    assert log.capped == 20 and len(log.calls) == 20 and not log.complete
    steps = [c.label for c in log.calls if c.kind == "call"]
    assert steps == [f"step#{k}" for k in range(1, len(steps) + 1)] and len(steps) >= 9
    # the equations of the calls kept are named by them, the later ones by JAX alone
    stacks = [str(e.source_info.name_stack) for e in traced.jaxpr.eqns]
    named = [k for k, s in enumerate(stacks) if s.startswith("step#")]
    assert stacks[:3] == ["step#1/sin", "step#1", "step#1"], stacks[:3]
    assert named == list(range(len(named))) and len(named) <= 3 * len(steps), stacks
    assert len(stacks) == 3 * 60
    # the same program as a trace without the capture (jaxprs print no name stacks)
    _, plain = _trace(loop, enabled=False)
    assert str(traced.jaxpr) == str(plain.jaxpr)


def test_below_the_cap_nothing_is_capped():
    log, _ = _trace(make_loop(30))
    assert log.capped == 0 and log.complete
    assert [c.label for c in log.calls if c.kind == "call"] == [f"step#{k}" for k in range(1, 31)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_capped_compilation_says_what_was_not_grouped(monkeypatch, backend):
    monkeypatch.setattr(_record, "MAX_CALLS", 20)
    monkeypatch.setenv("NBCOMPILE_CALL_CAPTURE", backend)
    loop = make_loop(60)
    c = nbcompile.compile(loop, X)
    assert c.stages.calls.capped == 20
    (note,) = [n for n in c.notes if n.startswith("call groups:")]
    assert "first 20 calls" in note and "not grouped by call" in note
    groups = [g.label for g in c.graph.groups if g.call == "call"]
    assert groups and all(g.startswith("step#") for g in groups) and len(groups) < 20
    np.testing.assert_allclose(np.asarray(c.compiled(X)), np.asarray(jax.jit(loop)(X)), rtol=1e-6)


@pytest.mark.slow
def test_ten_to_the_five_calls_record_max_calls_and_trace_the_whole_program():
    # 10^5 calls of a two-operation function: ~13 s of JAX's own tracing on a 2-core machine;
    # the capture adds MAX_CALLS calls' worth (see _record.MAX_CALLS for the measured cost)
    def cheap(x):
        return x * 0.5 + 1.0

    def loop(x):
        for _ in range(100_000):
            x = cheap(x)
        return x

    log, traced = _trace(loop)
    assert log.capped == _record.MAX_CALLS == len(log.calls)
    assert len(traced.jaxpr.eqns) == 200_000
    assert all(c.frame is None for c in log.calls)  # no frame held after the trace
