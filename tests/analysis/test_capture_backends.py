"""Both call-capture backends compile the same models to the same groups, labels and programs
(issue 39 item 3).

The ``sys.monitoring`` backend (``capture/_monitor.py``, Python 3.12+) and the traceback backend
(``capture/_frames.py``, the only one on Python 3.11, and on 3.12+ where asked for) feed one
recorder, so they must agree exactly: the same groups in the graph and the gradient program
(ids, labels, parents, kinds), the same recorded calls, and the same programs (the lowered
module with its locations and name stacks, the compiled HLO with its ``op_name`` metadata, the
names of the calls the kernels came from). Each model is compiled through
``nbcompile.compile`` once per backend (``NBCOMPILE_CALL_CAPTURE``), from the same line (the
program records where ``compile`` was called).

On Python 3.11 only the traceback backend exists: there its groups are checked against the
labels written here, which both backends must also give on 3.12+.

The models are this test file's own functions: a test file is the user's code.
"""

from __future__ import annotations

import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nbcompile
from nbcompile.capture import _events

BACKENDS = ["frames"] + (["monitoring"] if sys.version_info >= (3, 12) else [])
# Python 3.13+ runs the monitoring backend that keeps labels in JAX's context by events
# (capture/_events.py); 3.12 the one that answers at each equation (capture/_monitor.py). Where
# both can run, the 3.12 one is compared as well.
if _events.available():
    BACKENDS.append("monitoring, 3.12's")


def block(p, x):
    h = jax.nn.gelu(x @ p)
    return x + h.var(axis=-1, keepdims=True)  # a keyword call: CALL_KW on Python 3.13


def loop_loss(params, x):
    for p in params:
        x = block(p, x)
    return jnp.mean(x**2)


jit_block = jax.jit(block)


def nested_loss(params, x):
    for p in params:
        x = jit_block(p, x)
    return jnp.mean(x**2)


def step(x, p):
    return block(p, x), None


def scan_loss(params, x):
    x, _ = jax.lax.scan(step, x, params)
    return jnp.mean(x**2)


def layer(w, x):
    return jnp.sin(x @ w)


def remat_loss(params, x):
    for w in params:
        x = jax.checkpoint(layer)(w, x)
    return jnp.mean(x)


def norm(x):
    mu = x.mean(axis=-1, keepdims=True)
    return (x - mu) / jnp.sqrt(x.var(axis=-1, keepdims=True) + 1e-5)


def attention(x):
    scores = x @ x.T / np.sqrt(x.shape[-1])
    return jax.nn.softmax(scores, axis=-1) @ x


def transformer(params, x):
    for p in params:
        x = x + attention(norm(x))
        x = x + jax.nn.gelu(norm(x) @ p)
    return jnp.mean(x**2)


PARAMS = [jnp.asarray(np.eye(4, dtype=np.float32) * (k + 1) * 0.1) for k in range(3)]
X = jnp.asarray(np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4))
BLOCKS = ["block#1", "block#2", "block#3"]
# model -> (function, args, the user's calls' labels in the graph, in order)
MODELS = {
    "loop": (loop_loss, (PARAMS, X), BLOCKS),
    "nested jit": (nested_loss, (PARAMS, X), BLOCKS),
    "scan": (scan_loss, (jnp.stack(PARAMS), X), ["step#1", "block#1"]),
    "checkpoint": (remat_loss, (PARAMS, X), ["layer#1", "layer#2", "layer#3"]),
    "transformer": (
        transformer,
        (PARAMS, X),
        [f"{name}#{k}" for k in (1, 2, 3) for name in ("attention", "norm")]
        + [f"norm#{k}" for k in (4, 5, 6)],
    ),
}


def _compile(fn, args, backend, monkeypatch):
    name = backend.split(",")[0]
    monkeypatch.setenv("NBCOMPILE_CALL_CAPTURE", name)
    with monkeypatch.context() as patched:
        if backend != name:
            patched.setattr(_events, "available", lambda: False)
        c = nbcompile.compile(fn, *args, grad=True)  # one line for every backend: same locations
    assert c.stages.calls.backend == name
    assert c.stages.calls.complete
    return c


def _groups(graph):
    return [(g.id, g.label, g.parent, g.call) for g in graph.groups]


_TABLE = re.compile(r"^(FileNames|FunctionNames|FileLocations|StackFrames)$")
_ROW = re.compile(r"^(\d+) (.*)$")
_FIELD = re.compile(r"(\w+)=(\d+)")
_FRAME_ID = re.compile(r"stack_frame_id=(\d+)")


def _hlo(text):
    """XLA's HLO text with each ``stack_frame_id`` replaced by the Python stack it names
    (innermost first): XLA numbers its stack-frame table in an order of its own, which may
    differ between two compiles of the same program."""
    tables: dict[str, dict[str, str]] = {}
    body, table = [], None
    for line in text.splitlines():
        if _TABLE.match(line):
            table = tables.setdefault(line, {})
        elif table is not None and _ROW.match(line):
            key, value = _ROW.match(line).groups()
            table[key] = value
        elif table is not None and not line:
            table = None
        else:
            body.append(line)
    files, functions = tables.get("FileNames", {}), tables.get("FunctionNames", {})
    locations, frames = tables.get("FileLocations", {}), tables.get("StackFrames", {})

    def location(lid):
        f = dict(_FIELD.findall(locations[lid]))
        where = files[f.pop("file_name_id")], functions[f.pop("function_name_id")]
        return (*where, tuple(sorted(f.items())))

    def stack(fid):
        out = []
        while fid in frames and len(out) <= len(frames):
            f = dict(_FIELD.findall(frames[fid]))
            out.append(location(f["file_location_id"]))
            fid = str(int(f["parent_frame_id"]) - 1)  # 1-based, printed one up: 0 is none
        return repr(out)

    return "\n".join(_FRAME_ID.sub(lambda m: "stack=" + stack(m.group(1)), ln) for ln in body)


def _picture(c):
    """Everything the capture decides, read from a compilation."""
    return {
        "groups": _groups(c.graph),
        "grad groups": _groups(c.grad.analysis.traced_graph),
        "calls": c.stages.calls.to_json(),
        "lowered": c.lowered.as_text(debug_info=True),
        "hlo": _hlo(c.hlo),
        "grad hlo": _hlo(c.grad.hlo),
        "kernel functions": c.grad.analysis.kernel_functions,
    }


@pytest.fixture(scope="module")
def pictures():
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        for model, (fn, args, _labels) in MODELS.items():
            out[model] = {b: _picture(_compile(fn, args, b, mp)) for b in BACKENDS}
    return out


@pytest.mark.parametrize("model", list(MODELS))
def test_each_backend_gives_the_calls_written_here(pictures, model):
    expected = MODELS[model][2]
    for backend, got in pictures[model].items():
        labels = [label for _id, label, _parent, kind in got["groups"] if kind == "call"]
        if model == "transformer":  # the order the groups are listed in is not the point here
            assert sorted(labels) == sorted(expected), (backend, labels)
        else:
            assert labels == expected, (backend, labels)
        # the calls reach the program: the lowered module's name stacks and XLA's op names
        for label in expected:
            assert label in got["lowered"] and label in got["hlo"], (backend, label)


@pytest.mark.skipif(len(BACKENDS) < 2, reason="sys.monitoring needs Python >= 3.12")
@pytest.mark.parametrize("model", list(MODELS))
def test_both_backends_give_the_same_groups_labels_and_programs(pictures, model):
    frames = pictures[model]["frames"]
    for backend in BACKENDS[1:]:
        other = pictures[model][backend]
        assert frames.keys() == other.keys()
        for what in frames:
            assert frames[what] == other[what], f"{model}: {what} differ: frames, {backend}"


def test_library_calls_are_named_as_written_under_each_backend(pictures):
    for backend, got in pictures["transformer"].items():
        libs = {label.split("#")[0] for _id, label, _p, kind in got["groups"] if kind == "library"}
        assert {"softmax", "gelu", "var", "mean"} <= libs, (backend, libs)
    for backend, got in pictures["loop"].items():
        pairs = {(c["parent"], c["label"]) for c in got["calls"] if c["kind"] == "library"}
        assert {(b, "gelu") for b in BLOCKS} | {(b, "var") for b in BLOCKS} <= pairs, backend
