"""A frozen model's first call skips LAPACK set-up unless its program uses LAPACK."""

from __future__ import annotations

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np

import nbcompile

CHILD = """
import os, sys
os.environ["JAX_PLATFORMS"] = "cpu"
import numpy as np
from jax._src.lax import linalg
from nbcompile.frozen import load
calls = []
original = linalg.initialize_lapack
linalg.initialize_lapack = lambda: (calls.append(1), original())[1]
m = load(sys.argv[1])
y = np.asarray(m(np.load(sys.argv[2])))
np.save(sys.argv[3], y)
print("LAPACK", len(calls))
"""


def run_child(tmp_path, path, x):
    np.save(tmp_path / "x.npy", x)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split("LAPACK")[1]), np.load(tmp_path / "y.npy")


def test_no_lapack_setup_for_a_plain_model(tmp_path):
    def predict(p, x):
        return jnp.tanh(x @ p["w"])

    p = {"w": jnp.asarray(np.random.default_rng(0).normal(size=(8, 4)), jnp.float32)}
    x = np.ones((3, 8), np.float32)
    nbcompile.freeze(predict, p, jnp.asarray(x), path=tmp_path / "m.nbc")
    calls, y = run_child(tmp_path, tmp_path / "m.nbc", x)
    assert calls == 0
    np.testing.assert_array_equal(y, np.asarray(jax.jit(predict)(p, x)))


def test_lapack_model_still_sets_it_up_and_works(tmp_path):
    def solve(p, b):
        return jnp.linalg.solve(p["a"], b)

    a = np.random.default_rng(1).normal(size=(4, 4)).astype(np.float32) + 4 * np.eye(
        4, dtype=np.float32
    )
    p = {"a": jnp.asarray(a)}
    b = np.ones((4, 2), np.float32)
    nbcompile.freeze(solve, p, jnp.asarray(b), path=tmp_path / "s.nbc", batch="static")
    calls, y = run_child(tmp_path, tmp_path / "s.nbc", b)
    assert calls >= 1
    np.testing.assert_allclose(y, np.linalg.solve(a, b), rtol=1e-4)


def test_shape_refinement_reuses_the_lowering_context(tmp_path, monkeypatch):
    """A symbolic-batch program's first compile refines its shapes; the refined module is
    parsed into the lowering's own MLIR context (no new context: ~2.5 ms of a small model's
    first call), and nothing changes for other callers of make_ir_context."""
    from jax._src.interpreters import mlir

    from nbcompile.frozen import _jaxcompat

    path = tmp_path / "m.nbc"
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    nbcompile.freeze(lambda p, x: jnp.tanh(x @ p), w, np.ones((2, 3), np.float32), path=path)
    model = nbcompile.load(path)
    refined = []
    real_refine = mlir.refine_polymorphic_shapes

    def spy(module):
        out = real_refine(module)
        refined.append((module.context, out.context))
        return out

    monkeypatch.setattr(mlir, "refine_polymorphic_shapes", spy)
    x = np.ones((5, 3), np.float32)
    np.testing.assert_allclose(np.asarray(model(x)), np.tanh(x @ w), rtol=1e-6)
    assert len(refined) == 1
    lowering_context, parsed_into = refined[0]
    assert parsed_into is lowering_context
    assert getattr(_jaxcompat._REUSE_CONTEXT, "context", None) is None
    context = mlir.make_ir_context()  # everyone else: JAX's own choice
    reused = getattr(mlir, "_thread_local_context", None)
    if reused is None:  # JAX 0.10: a new context per call
        assert context is not lowering_context
    else:  # JAX 0.12 reuses one context per thread itself: the one it keeps
        assert context is reused.value[0]


SERVE = """
import sys, jax, numpy as np
jax.config.update("jax_compilation_cache_dir", sys.argv[2])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
from jax._src import compiler
compiles = []
real = compiler.backend_compile_and_load
compiler.backend_compile_and_load = lambda *a, **k: compiles.append(1) or real(*a, **k)
from nbcompile.frozen import load
y = load(sys.argv[1])(np.ones((4, 3), np.float32))
print(len(compiles), float(np.asarray(y).sum()))
"""


def test_serving_processes_can_use_jaxs_persistent_cache(tmp_path):
    """docs/guide.md's serving tip: with JAX's persistent compilation cache on, a later process
    loads a frozen model's executable instead of compiling it, and computes the same."""
    from ..helpers import run_child

    path = tmp_path / "m.nbc"
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    nbcompile.freeze(lambda p, x: jnp.tanh(x @ p), w, np.ones((2, 3), np.float32), path=path)
    cache = str(tmp_path / "jax-cache")
    first = run_child(["-c", SERVE, str(path), cache]).stdout.split()
    second = run_child(["-c", SERVE, str(path), cache]).stdout.split()
    assert first[0] == "1" and second[0] == "0", (first, second)
    assert first[1] == second[1]
