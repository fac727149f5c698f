"""Code typed at a Python prompt, run by ``python -c`` or ``exec``'d from a string is the user's
code: its calls are groups by function (``layer#1`` …), as for a file (issue 40 item 8; before,
such code fell back to chunks such as "chunk · 92 ops"). Checked under each call-capture backend
the Python has, in a fresh interpreter for ``-c`` and ``<stdin>``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROGRAM = """\
import json
import jax.numpy as jnp
import nbcompile

def layer(w, x):
    return jnp.tanh(w @ x)

def net(ws, x):
    for w in ws:
        x = layer(w, x)
    return jnp.sum(x)

ws = [jnp.eye(4) * (0.5 + 0.1 * k) for k in range(3)]
c = nbcompile.compile(net, ws, jnp.ones(4))
print("GROUPS", json.dumps([g.label for g in c.graph.groups if g.call == "call"]))
"""
LAYERS = ["layer#1", "layer#2", "layer#3"]
BACKENDS = ["frames"] + (["monitoring"] if sys.version_info >= (3, 12) else [])


def _groups(stdout: str) -> list[str]:
    line = next(ln for ln in stdout.splitlines() if ln.startswith("GROUPS "))
    return json.loads(line.removeprefix("GROUPS "))


def _run(args: list[str], backend: str, stdin: str | None = None) -> list[str]:
    env = dict(os.environ, NBCOMPILE_CALL_CAPTURE=backend, JAX_PLATFORMS="cpu")
    done = subprocess.run(
        [sys.executable, *args], input=stdin, capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return _groups(done.stdout)


@pytest.mark.parametrize("backend", BACKENDS)
def test_python_c_code_is_grouped_by_function(backend):
    assert _run(["-c", PROGRAM], backend) == LAYERS


@pytest.mark.parametrize("backend", BACKENDS)
def test_code_read_from_stdin_is_grouped_by_function(backend):
    assert _run(["-"], backend, stdin=PROGRAM) == LAYERS


@pytest.mark.parametrize("backend", BACKENDS)
def test_exec_of_a_string_is_grouped_by_function(backend, monkeypatch, capsys):
    monkeypatch.setenv("NBCOMPILE_CALL_CAPTURE", backend)
    exec(compile(PROGRAM, "<string>", "exec"), {"__name__": "__exec__"})
    assert _groups(capsys.readouterr().out) == LAYERS
