"""Shared test helpers: cells for the magic tests, and the target-independent checks
(``run_all``: --grad, errors with lines, print capture, keyword arguments as inputs,
compiler options, the cache) run on every target by tests/test_targets_behaviour.py
(and on an 8-device mesh by behaviour_child.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
EIGHT_CPU_DEVICES = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8"}


def run_child(
    argv: list[str], *, env: dict[str, str] | None = None, timeout: int = 300
) -> subprocess.CompletedProcess[str]:
    """Run ``python *argv`` (a script and its arguments, or ``-c CODE``) on the CPU with the
    repository importable; the test fails with the child's output if it exits non-zero."""
    full = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT), **(env or {})}
    proc = subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        env=full,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def freeze_small_matmul(path: Path) -> Path:
    """A tiny frozen model (``x @ p``, p 3x4) that the record, isolation and fuzz tests load."""
    from nbcompile.frozen import freeze

    freeze(
        lambda p, x: x @ p,
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.ones((2, 3), np.float32),
        path=path,
        measure_compiled=False,
    )
    return path


def child_json(argv: list[str], **kw: Any) -> Any:
    """:func:`run_child`, then the JSON object on the last line of its standard output."""
    return json.loads(run_child(argv, **kw).stdout.strip().splitlines()[-1])


BEHAVIOUR_SETUP = """
import jax, jax.numpy as jnp, numpy as np, nbcompile
x = jnp.asarray(np.random.default_rng(1).normal(size=(8, 4)), jnp.float32)
w = jnp.asarray(np.random.default_rng(0).normal(size=(4, 4)), jnp.float32)
SCALE = 2.0
"""

GRAD = """%%compile --grad {opts}
def loss(w, x):
    return jnp.mean(jnp.tanh(x @ w) * SCALE)
loss(w, x)
"""

BAD_IF = """%%compile {opts}
def bad(w, x):
    if x.sum() > 0:
        return x @ w
    return x
bad(w, x)
"""

PRINTS = """%%compile {opts}
def noisy(w, x):
    print("tracing", x.shape)
    return x @ w
noisy(w, x)
"""

KWARGS = """%%compile {opts}
def scaled(x, *, w):
    return x @ w
scaled(x, w=w)
"""


class XlaCompiles:
    """Counts real XLA backend compiles through jax.monitoring."""

    def __init__(self) -> None:
        self.count = 0
        jax.monitoring.register_event_duration_secs_listener(self._listen)

    def _listen(self, name: str, *_: Any, **__: Any) -> None:
        if name == "/jax/core/compile/backend_compile_duration":
            self.count += 1


def run(ip: Any, text: str) -> Any:
    """Run a ``%%compile`` cell (``text`` starts with the magic line) in ``ip``."""
    return ip.run_cell(text)


def last(ip: Any) -> Any:
    import nbcompile

    return nbcompile.last()


def check_grad(ip: Any, opts: str, runnable: bool) -> None:
    res = run(ip, GRAD.format(opts=opts))
    assert res.success, res.error_in_exec
    c = last(ip)
    assert c.grad is not None, "--grad was dropped"
    assert c.grad.lowered is not None and c.gradient is not None
    assert c.gradient.forward_ops > 0 and c.gradient.backward_ops > 0
    if runnable:
        ns = ip.user_ns
        value, grads = c.grad.fn(ns["w"], ns["x"])
        want_v, want_g = jax.value_and_grad(ns["loss"].__wrapped__)(ns["w"], ns["x"])
        np.testing.assert_allclose(value, want_v, rtol=1e-5)
        np.testing.assert_allclose(grads, want_g, rtol=1e-5, atol=1e-6)


def check_error(ip: Any, opts: str) -> None:
    from nbcompile.errors import NbcompileError

    before = dict(ip.user_ns)
    res = run(ip, BAD_IF.format(opts=opts))
    err = res.error_in_exec
    assert isinstance(err, NbcompileError), repr(err)
    assert (err.code, err.line) == ("NBC201", 3), str(err)
    assert "bad" not in ip.user_ns or ip.user_ns["bad"] is before.get("bad")


def check_print(ip: Any, opts: str) -> None:
    res = run(ip, PRINTS.format(opts=opts))
    assert res.success, res.error_in_exec
    assert any("print() ran once" in n for n in last(ip).notes)


def check_kwargs(ip: Any, opts: str) -> None:
    res = run(ip, KWARGS.format(opts=opts))
    assert res.success, res.error_in_exec
    jaxpr = last(ip).jaxpr
    assert len(jaxpr.jaxpr.invars) == 2, "the keyword argument was baked in, not an input"
    assert all(np.size(c) < 16 for c in jaxpr.consts), "w became a constant"


def check_compiler_options(ip: Any, api: dict[str, Any], compiles: bool) -> None:
    import pytest

    import nbcompile
    from nbcompile.errors import CompileError

    ns = ip.user_ns
    options = {"xla_nbcompile_no_such_option": True}
    if compiles:
        with pytest.raises(CompileError) as info:
            nbcompile.compile(lambda w, x: x @ w, ns["w"], ns["x"], compiler_options=options, **api)
        assert info.value.code == "NBC400"
    else:
        c = nbcompile.compile(lambda w, x: x @ w, ns["w"], ns["x"], compiler_options=options, **api)
        assert any("compiler options" in n for n in c.notes), c.notes


def check_cache(ip: Any, opts: str, counter: XlaCompiles) -> None:
    assert run(ip, GRAD.format(opts=opts)).success
    first = last(ip)
    before = counter.count
    assert run(ip, GRAD.format(opts=opts)).success
    again = last(ip)
    assert again.cache_hit and again.program is first.program
    assert counter.count == before, "an unchanged cell compiled again"
    assert run(ip, "SCALE = 3.0").success  # a global the traced code reads
    assert run(ip, GRAD.format(opts=opts)).success
    assert not last(ip).cache_hit, "a changed global gave a stale cache hit"


def run_all(
    ip: Any, opts: str, api: dict[str, Any], *, runnable: bool, compiles: bool, counter: XlaCompiles
) -> list[str]:
    """Every check on one target; returns the names of the checks that ran."""
    done = []
    for name, check in (
        ("grad", lambda: check_grad(ip, opts, runnable)),
        ("error", lambda: check_error(ip, opts)),
        ("print", lambda: check_print(ip, opts)),
        ("kwargs", lambda: check_kwargs(ip, opts)),
        ("compiler_options", lambda: check_compiler_options(ip, api, compiles)),
        ("cache", lambda: check_cache(ip, opts, counter)),
    ):
        ip.run_cell(BEHAVIOUR_SETUP)
        check()
        done.append(name)
    return done


# --- the magic tests' example cell -------------------------------------------------

from nbcompile.errors import NbcompileError  # noqa: E402

SETUP = """
import jax, jax.numpy as jnp, numpy as np
params = {"w": jnp.asarray(np.random.default_rng(0).normal(size=(3, 4)), jnp.float32),
          "b": jnp.zeros((1, 4), jnp.float32)}
x = jnp.asarray(np.random.default_rng(1).normal(size=(2, 3)), jnp.float32)
"""

PREDICT = """%%compile{opts}
def predict(params, x):
    h = jnp.tanh(x @ params["w"] + params["b"])
    return h * 2.0 + 1.0
predict(params, x){end}
"""

COUNTER = XlaCompiles()


def cell(text: str) -> str:
    """Cell text without its `%%compile` line (run_cell_magic takes the body)."""
    return text.split("\n", 1)[1]


def setup(shell: Any) -> Any:
    shell.reset(new_session=False)
    res = shell.run_cell(SETUP)
    assert res.success, res.error_in_exec
    return shell


def failing(ip: Any, text: str, code: str, line: int | None) -> NbcompileError:
    """Run a failing cell; check the error, its line, and that the namespace is unchanged."""
    before = dict(ip.user_ns)
    res = run(ip, text)
    err = res.error_in_exec
    assert isinstance(err, NbcompileError), repr(err)
    assert err.code == code, str(err)
    assert err.line == line, str(err)
    after = ip.user_ns
    added = set(after) - set(before) - {"_", "__", "___"}
    added = {n for n in added if not n.startswith("_")}
    assert not added, f"names leaked from a failed cell: {added}"
    changed = [n for n in before if not n.startswith("_") and after.get(n) is not before[n]]
    assert not changed, f"names changed by a failed cell: {changed}"
    assert run(ip, PREDICT.format(opts=" -q -f", end="")).success, "next %%compile must work"
    return err
