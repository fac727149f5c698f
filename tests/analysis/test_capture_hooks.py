"""The call recorder's mechanics (``nbcompile.capture.calls``), apart from IPython.

The recorder reads the user's frames from the code objects of JAX's own traceback of each
equation and reads only the frames it needs. JAX's tracebacks stop where a nested trace began
(a ``jax.jit`` function called inside the model, every ``jnp`` function that is itself jitted),
so the frames above that point are walked once per nested trace. These tests pin what that must
give: each call of a block its own group, the library calls named as written (also inside a
nested trace), a ``lax.scan`` body as a call, no frame kept, and a trace that never fails (nor
changes its program) when the recorder breaks. The labels are those the recorder gave when it
walked every frame (checked against that version before it changed).

Each runs under both backends where the Python has them (``sys.monitoring`` from 3.12).

The model is this test file's own functions: a test file is the user's code.
"""

from __future__ import annotations

import functools
import sys

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

from nbcompile.capture import _events, _frames, _monitor, _record
from nbcompile.capture.calls import record_calls
from nbcompile.stages import make_jitted


def block(p, x):
    h = jax.nn.gelu(x @ p)
    return x + h.var(axis=-1, keepdims=True)


def loop_loss(params, x):
    for p in params:
        x = block(p, x)
    return jnp.mean(x**2)


jit_block = jax.jit(block)


def nested_loss(params, x):
    for p in params:
        x = jit_block(p, x)  # a nested trace: JAX's tracebacks inside it stop at its start
    return jnp.mean(x**2)


def step(x, p):
    return block(p, x), None


def scan_loss(params, x):
    x, _ = jax.lax.scan(step, x, params)
    return jnp.mean(x**2)


PARAMS = [jnp.asarray(np.eye(4, dtype=np.float32) * (k + 1)) for k in range(3)]
X = jnp.ones((2, 4), jnp.float32)


BACKENDS = ["frames"] + (["monitoring"] if sys.version_info >= (3, 12) else [])
backends = pytest.mark.parametrize("backend", BACKENDS)


def _trace(fn, *args, backend=None):
    jitted = make_jitted(fn)  # a fresh function each time, as nbcompile does: no trace cache
    with record_calls(backend=backend) as log:
        traced = jitted.trace(*args)
    assert backend is None or log.backend == backend
    return log, traced


def _labels(log, kind=None):
    return [c.label for c in log.calls if kind is None or c.kind == kind]


def _stacks(traced):
    out = []

    def visit(jaxpr):
        for eqn in jaxpr.eqns:
            out.append(str(eqn.source_info.name_stack))
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                visit(sub)

    visit(traced.jaxpr.jaxpr)
    return out


@backends
def test_each_call_is_one_group_and_library_calls_are_named_as_written(backend):
    log, traced = _trace(loop_loss, PARAMS, X, backend=backend)
    assert log.complete
    assert _labels(log, "call") == ["block#1", "block#2", "block#3"]
    libs = {(c.parent.label, c.label) for c in log.calls if c.kind == "library"}
    for k in (1, 2, 3):
        assert (f"block#{k}", "gelu") in libs and (f"block#{k}", "var") in libs
    stacks = _stacks(traced)
    for k in (1, 2, 3):
        assert f"block#{k}/gelu" in stacks and f"block#{k}/var" in stacks


@backends
def test_each_call_of_a_jitted_block_is_a_call_of_the_block(backend):
    # JAX traces jit_block once (its first call) and reuses that trace for the others, which
    # run no Python of the block: each is still a call of the user's block (issue 40 item 7).
    # The jitted program's own equations are named inside it (``gelu``), under the call.
    log, traced = _trace(nested_loss, PARAMS, X, backend=backend)
    assert log.complete
    assert _labels(log, "call") == ["block#1", "block#2", "block#3"]
    # the block's own frame, where JAX ran it, is the call block#1 (transparent: no label)
    libs = [((c.parent.shown or c.parent).label, c.label) for c in log.calls if c.kind == "library"]
    assert ("block#1", "gelu") in libs and ("block#1", "var") in libs
    outer = [str(e.source_info.name_stack) for e in traced.jaxpr.eqns]
    assert [s for s in outer if s.startswith("block#")] == ["block#1", "block#2", "block#3"]
    assert {"gelu", "var"} <= set(_stacks(traced))


@backends
def test_a_scan_body_is_a_call(backend):
    log, traced = _trace(scan_loss, jnp.stack(PARAMS), X, backend=backend)
    assert log.complete
    names = _labels(log, "call")
    assert "step#1" in names and "block#1" in names
    assert "step#1/block#1/gelu" in _stacks(traced)


@backends
def test_no_frame_is_kept_after_the_trace(backend):
    log, _ = _trace(loop_loss, PARAMS, X, backend=backend)
    assert log.calls and all(c.frame is None for c in log.calls)


@backends
def test_a_broken_recorder_never_fails_the_trace_nor_changes_its_program(monkeypatch, backend):
    _, good = _trace(loop_loss, PARAMS, X, backend=backend)

    def boom(self, *args):
        raise RuntimeError("the recorder broke")

    monkeypatch.setattr(_record.Recorder, "new_call", boom)  # every backend records with it
    log, traced = _trace(loop_loss, PARAMS, X, backend=backend)
    assert not log.complete
    assert str(traced.jaxpr) == str(good.jaxpr)  # the same program, JAX's own name stacks
    out = jax.jit(loop_loss)(PARAMS, X)
    assert np.isfinite(np.asarray(out))


@backends
@pytest.mark.parametrize("fn", [loop_loss, nested_loss])
def test_recording_does_not_change_the_program(fn, backend):
    with record_calls(enabled=False):
        plain = make_jitted(fn).trace(PARAMS, X)
    _, recorded = _trace(fn, PARAMS, X, backend=backend)
    assert [e.primitive.name for e in recorded.jaxpr.eqns] == [
        e.primitive.name for e in plain.jaxpr.eqns
    ]


def test_a_moment_the_recorder_cannot_place_lets_go_of_no_running_call(monkeypatch):
    # Should the recorder fail to place one moment (JAX's traceback not matching the stack:
    # frames() answers (None, None)), the calls running then are still running: letting go of
    # their frames would make the block's next equation count as a new call (a block#4 of
    # three blocks; seen once as block#11 of ten in the full suite).
    real = _frames.FramesRecorder.frames
    blocks: list = []
    seen = {"lost": 0}

    def flaky(self, raw, own, depth):
        found = real(self, raw, own, depth + 1)
        frame = found[0]
        if frame is not None and frame.f_code is block.__code__:
            if not any(b is frame for b in blocks):
                blocks.append(frame)
            elif len(blocks) == 2 and not seen["lost"]:  # once, inside the second block
                seen["lost"] += 1
                return None, None
        return found

    monkeypatch.setattr(_frames.FramesRecorder, "frames", flaky)
    log, _ = _trace(loop_loss, PARAMS, X, backend="frames")
    assert seen["lost"] == 1
    assert log.complete
    assert _labels(log, "call") == ["block#1", "block#2", "block#3"]


# The stand-in for _Stack.now runs inside the recording's hooks: it must not be the user's
# code (this file is), or the backend would record its own stand-in as a call
_FLAKY_NOW = """
def make(real, block_code, blocks, seen):
    def flaky(self):
        found = real(self)
        frame = found[0]
        if frame is not None and frame.f_code is block_code:
            if not any(b is frame for b in blocks):
                blocks.append(frame)
            elif len(blocks) == 2 and not seen["lost"]:
                seen["lost"] += 1
                return None, None
        return found
    return flaky
"""


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring: Python 3.12+")
def test_a_moment_the_monitoring_backend_cannot_place_lets_go_of_no_running_call(monkeypatch):
    # The same with the sys.monitoring backend: a moment it answers (None, None) for
    helper: dict = {}
    exec(compile(_FLAKY_NOW, "<nbcompile-test-helper>", "exec"), helper)
    blocks: list = []
    seen = {"lost": 0}
    flaky = helper["make"](_monitor._Stack.now, block.__code__, blocks, seen)
    monkeypatch.setattr(_monitor._Stack, "now", flaky)
    monkeypatch.setattr(_events, "available", lambda: False)  # 3.12's backend, on 3.13 too
    log, _ = _trace(loop_loss, PARAMS, X, backend="monitoring")
    assert seen["lost"] == 1
    assert log.complete
    assert _labels(log, "call") == ["block#1", "block#2", "block#3"]


# A library function and a byte-identical copy of it in the user's own file: Python's code
# objects compare equal (their file is not compared), but only the copy is the user's.
_TWIN_SOURCE = """
def relay(f, x):
    return f(x)


def double_sin(x):
    return jnp.sin(x) * 2
"""


def _twins(tmp_path):
    lib: dict = {"jnp": jnp}
    exec(compile(_TWIN_SOURCE, "<nbcompile-test-library>", "exec"), lib)  # not a user file
    user_file = tmp_path / "twin.py"
    user_file.write_text(_TWIN_SOURCE)
    mine: dict = {"jnp": jnp}
    exec(compile(_TWIN_SOURCE, str(user_file), "exec"), mine)
    assert lib["double_sin"].__code__ == mine["double_sin"].__code__  # equal, not the same
    assert lib["double_sin"].__code__ is not mine["double_sin"].__code__
    return lib, mine


@backends
def test_a_user_function_equal_to_a_library_one_is_still_the_users(tmp_path, backend):
    # The chains of JAX's frames between the model and an equation are remembered to skip
    # re-checking them; the library's `double_sin` runs inside `relay` first, then the user's
    # copy at the same place. Taking the copy for the library code it equals would hide the
    # user's call inside the library call `relay`.
    lib, mine = _twins(tmp_path)
    relay, theirs, ours = lib["relay"], lib["double_sin"], mine["double_sin"]

    def twin_model(x):
        a = relay(theirs, x)
        b = relay(theirs, a)  # jnp.sin's second call: the path the user's copy takes too
        c = relay(ours, b)
        return c

    log, traced = _trace(twin_model, X, backend=backend)
    assert log.complete
    assert _labels(log, "call") == ["double_sin#1"]
    assert _stacks(traced) == [
        "relay", "relay",  # the library's sin and multiply: inside the library call, as written
        "relay#2", "relay#2",
        "double_sin#1/sin", "double_sin#1",  # the user's copy: a call of its own
    ]  # fmt: skip


@backends
def test_a_library_copy_of_the_users_function_inside_its_call_is_not_the_user(tmp_path, backend):
    # The user's `relay` calls the library's equal copy of it (through a partial). The
    # monitoring backend finds the frame the user's relay is calling by looking its code up in
    # the stack (list.index: equality), where the library's copy, running inside the call, is
    # nearer the equation; a look-up that stopped at that equal copy would lose the call `f`
    # the user's relay makes (checked: it fails so).
    lib, mine = _twins(tmp_path)
    assert lib["relay"].__code__ == mine["relay"].__code__
    inner = functools.partial(lib["relay"], lib["double_sin"])

    def relay_model(x):
        return mine["relay"](inner, x)

    log, traced = _trace(relay_model, X, backend=backend)
    assert log.complete
    assert _labels(log) == ["relay_model", "relay#1", "f"]
    assert _stacks(traced) == ["relay#1/f", "relay#1/f"]  # sin and the product, inside f
