"""Where users are (SPEC 9.1): nbcompile installs beside the user's JAX without changing it, and
compiles with its call structure and gradient on whichever supported stack runs the tests
(``make test``: the newest Python and JAX; ``make test-compat``: Python 3.11, JAX 0.10.2)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import jax
import jaxlib
import pytest

from .test_kernel import execute, notebook, text_of

ROOT = Path(__file__).resolve().parents[1]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".")[:3] if p.isdigit())


def test_the_declared_range_holds_the_jax_installed_here():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    spec = next(d for d in deps if d.startswith("jax>="))
    low, high = spec.removeprefix("jax>=").split(",<")
    assert _version(low) <= (0, 10, 2), "the oldest supported JAX is 0.10.2 (SPEC 9.1)"
    assert _version(low) <= _version(jax.__version__) < _version(high)
    assert _version(jaxlib.__version__) >= _version(low)


def test_installing_nbcompile_keeps_the_jax_that_is_here(tmp_path):
    """What ``pip install`` of the project would change in this environment (which holds a
    supported JAX): nothing but nbcompile itself. The old pin (``jax<0.11``) made pip replace
    JAX 0.12 with 0.10.2 here."""
    report = tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--dry-run",
            "--report",
            str(report),
            "--disable-pip-version-check",
            "-e",
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    changed = {
        item["metadata"]["name"].lower(): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    assert "jax" not in changed and "jaxlib" not in changed, (
        f"pip would replace JAX {jax.__version__}: {changed}"
    )


CELLS = (
    """%load_ext nbcompile
import sys, jax, jax.numpy as jnp, numpy as np
rng = np.random.default_rng(0)
ws = [jnp.asarray(rng.normal(size=(16, 16)) / 4, jnp.float32) for _ in range(4)]
x = jnp.asarray(rng.normal(size=(8, 16)), jnp.float32)
def layer(w, h):
    return jnp.tanh(h @ w)""",
    """%%compile --grad
def loss(ws, x):
    h = x
    for w in ws:
        h = layer(w, h)
    return jnp.mean(h ** 2)
loss(ws, x)""",
    """c = _
labels = sorted({g.label for g in c.graph.groups if g.label.startswith("layer#")})
print("STACK", sys.version_info[:2], jax.__version__)
print("GROUPS", labels)
print("PAIRS", [(f, b) for f, b, _r in c.gradient.pairs])
value, grads = c.grad.fn(ws, x)
ref_value, ref_grads = jax.value_and_grad(loss.compilation.original)(ws, x)
assert np.allclose(value, ref_value, rtol=1e-6)
assert all(np.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(grads, ref_grads))""",
)


@pytest.mark.kernel
def test_compile_with_grad_in_a_real_kernel_on_this_stack():
    nb = execute(notebook(*CELLS))
    out = text_of(nb.cells[2])
    stack = next(line for line in out.splitlines() if line.startswith("STACK"))
    assert jax.__version__ in stack, out
    groups = next(line for line in out.splitlines() if line.startswith("GROUPS"))
    assert groups == "GROUPS ['layer#1', 'layer#2', 'layer#3', 'layer#4']", out
    pairs = next(line for line in out.splitlines() if line.startswith("PAIRS"))
    for k in range(1, 5):
        assert f"('layer#{k}', 'layer#{k} (backward)')" in pairs, out
