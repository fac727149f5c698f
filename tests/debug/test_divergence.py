"""--debug compares the compiled program with its op-by-op run and names the HLO rewrite where
they part (issue 21). Two rewrites: ``exp(a) / exp(a)``, which XLA computes as ``exp(a - a)``
(JAX 0.10.2's XLA:CPU by default; JAX 0.12's only with ``xla_cpu_enable_fast_math``, so it is
compiled with that option here), and a division by a constant, which XLA computes as a product
with the reciprocal (both versions, by default): ``inf / 1e38`` is ``inf`` op by op, while
``inf * 1e-38`` meets a subnormal constant XLA:CPU flushes to zero."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nbcompile.capture.source import SourceInfo
from nbcompile.debug import debug_run
from nbcompile.debug.diverge import differ

SOURCE = SourceInfo(filename=__file__, text=Path(__file__).read_text())
X = jnp.asarray(np.random.default_rng(0).normal(size=(64, 128)), jnp.float32)


def line_of(text: str) -> int:
    return next(i for i, line in enumerate(SOURCE.lines, 1) if text in line)


def unstable(x):  # tutorial 07's example, as written there
    big = jnp.exp(x * 100.0)  # overflows to inf for large x
    ratio = big / big  # inf / inf = NaN
    return jnp.tanh(ratio).mean()


JAX = tuple(int(p) for p in jax.__version__.split(".")[:2])
# the options under which this XLA rewrites exp(a)/exp(a) to exp(a - a): JAX 0.10.2 by default
# (with fast math it folds the whole program), JAX 0.12 only with fast math
FAST_MATH = {} if JAX < (0, 12) else {"xla_cpu_enable_fast_math": True}


def rescale(x):
    total = jnp.abs(x).sum() * 1e38  # overflows to inf
    return total / 1e38  # XLA: total * 1e-38, a subnormal constant flushed to zero


def healthy(x):
    return (jnp.tanh(x) * 2.0 + 1.0).sum()


def test_the_rewritten_division_is_found_with_its_hlo_ops():
    d = debug_run(jax.make_jaxpr(unstable)(X), (X,), source=SOURCE, compiler_options=FAST_MATH)
    assert d.stopped and d.nan_at["primitive"] == "div"
    div = d.divergence
    assert div is not None and div.differs and div.stopped_at == d.nan_at["id"]
    first = div.first
    assert first["primitive"] == "div" and first["line"] == line_of("ratio = big / big")
    assert first["eager"]["nan"] > 0 and first["compiled"]["nan"] == 0  # NaN only op by op
    assert first["compiled"]["min"] == first["compiled"]["max"] == 1.0  # exp(a - a)
    (out,) = div.compiled_outputs
    assert out["nan"] == 0 and out["min"] == pytest.approx(np.tanh(1.0))
    text = d.text()
    assert "does not compute what the op-by-op run did" in text
    if JAX < (0, 12):
        ops = [op["opcode"] for op in div.hlo_ops if op["from"]]
        assert ops == ["subtract", "exponential"], div.hlo_ops  # the rewrite, from this line
        assert all(op["fusion"] for op in div.hlo_ops)  # inside the fused kernel
        assert "XLA computes `div` as subtract, exponential" in text
    else:  # JAX 0.12 (fast math) folds the whole program into one constant (tanh(1))
        assert "fusion(" not in jax.jit(unstable).lower(X).compile(FAST_MATH).as_text()
    assert div.compared == 2  # the div, then its input exp (which agrees)
    assert ("the same compiler options" if FAST_MATH else "default options") in " ".join(div.notes)
    json.dumps(d.to_json(), allow_nan=False)


def test_without_stopping_the_outputs_are_compared():
    d = debug_run(
        jax.make_jaxpr(unstable)(X),
        (X,),
        source=SOURCE,
        stop_on="none",
        compiler_options=FAST_MATH,
    )
    assert d.divergence.outputs_differ == [0]
    assert d.divergence.first["id"] == "e2"


def test_default_options_and_the_division_by_a_constant():
    """With XLA's default options: a division by a constant is a product with its reciprocal
    (both supported JAX versions), found at the division's line; JAX 0.12 no longer rewrites
    ``exp(a) / exp(a)`` (the op-by-op NaN is the compiled program's too)."""
    d = debug_run(jax.make_jaxpr(rescale)(X), (X,), source=SOURCE)
    div = d.divergence
    assert div.differs and div.outputs_differ == [0]
    first = div.first
    assert first["primitive"] == "div" and first["line"] == line_of("return total / 1e38")
    assert first["eager"]["inf"] == 1 and first["compiled"]["inf"] == 0
    assert [op["opcode"] for op in div.hlo_ops if op["from"] and op["opcode"] != "fusion"] == [
        "multiply"
    ]
    plain = debug_run(jax.make_jaxpr(unstable)(X), (X,), source=SOURCE)
    assert plain.divergence.differs == (JAX < (0, 12)), jax.__version__


def test_a_program_xla_does_not_change_compares_equal_without_prefix_compiles():
    d = debug_run(jax.make_jaxpr(healthy)(X), (X,), source=SOURCE)
    assert not d.divergence.differs and d.divergence.compared == 0
    assert "computes the same values" in d.text()


def test_a_nan_the_compiled_program_makes_too_is_not_a_divergence():
    def logs(x):
        return jnp.log(x - 10.0).sum()

    d = debug_run(jax.make_jaxpr(logs)(X), (X,), source=SOURCE)
    assert d.stopped and not d.divergence.differs
    assert "computes the same value" in d.divergence.text()


def test_given_compiled_outputs_and_hlo_are_used():
    closed = jax.make_jaxpr(healthy)(X)
    hlo = jax.jit(healthy).lower(X).compile().as_text()
    wrong = [jnp.float32(0.0)]  # not what the program computes: reported, from these outputs
    d = debug_run(closed, (X,), source=SOURCE, compiled_outputs=wrong, hlo=hlo)
    assert d.divergence.outputs_differ == [0]
    assert not any("default options" in n for n in d.divergence.notes)
    off = debug_run(closed, (X,), source=SOURCE, compare=False)
    assert off.divergence is None


def test_differ_tolerates_reassociation_not_nan_or_inf():
    a = np.linspace(-1, 1, 100, dtype=np.float32)
    assert not differ(a * (1 + 1e-6), a)
    assert differ(a * 1.01, a)
    b = a.copy()
    b[3] = np.nan
    assert differ(a, b) and differ(b, a) and not differ(b, b)
    c = a.copy()
    c[5] = np.inf
    assert differ(c, a) and not differ(c, c)
    assert differ(np.array([1, 2]), np.array([1, 3])) and not differ(np.array([1]), np.array([1]))


def test_through_the_magic_the_cell_line_is_named(shell):
    shell.reset(new_session=False)
    assert shell.run_cell(
        "import jax, jax.numpy as jnp, numpy as np\n"
        "x = jnp.asarray(np.random.default_rng(0).normal(size=(8, 16)) * 3,"
        " jnp.float32)"
    ).success
    res = shell.run_cell(
        "%%compile -q --debug\ndef rescale(x):\n    total = jnp.abs(x).sum() * 1e38\n"
        "    return total / 1e38\nrescale(x)\n"
    )
    assert res.success, res.error_in_exec
    d = shell.user_ns["rescale"].compilation.debug
    assert d.divergence.first["line"] == 4 and d.divergence.first["primitive"] == "div"
    assert "return total / 1e38" in d.divergence.text()
