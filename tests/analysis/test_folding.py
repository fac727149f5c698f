"""Constant folding at trace, lowering and XLA level, reported honestly."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from nbcompile.analysis import analyse

from .helpers import make_artifacts

A = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
B = np.random.default_rng(1).standard_normal((8, 8)).astype(np.float32)
BIG = np.random.default_rng(2).standard_normal((10_000_000,)).astype(np.float32)  # 40 MB


def const_matmul(x):
    return x + jnp.asarray(A) @ jnp.asarray(B)


def arange_matmul(x):
    return x + jnp.arange(16.0).reshape(4, 4) @ jnp.ones((4, 4))


def big_closure(x):
    return jnp.sum(x * jnp.asarray(BIG)[:4])


def literal_math(x):
    return x * jnp.sqrt(jnp.asarray(16.0))


def _xla(a):
    return [f for f in a.folded if f.stage == "xla"]


@pytest.fixture(scope="module")
def folded_matmul():
    return analyse(make_artifacts(const_matmul, jnp.ones((8, 8))))


def test_numpy_constant_matmul_is_folded_into_one_constant(folded_matmul):
    a = folded_matmul
    trace = [f for f in a.folded if f.stage == "trace"]
    assert {f.name for f in trace} == {"A", "B"}
    assert all(f.bytes == 8 * 8 * 4 and f.shape == "f32[8,8]" for f in trace)
    assert not any(f.folded for f in trace)  # captured into the program, not folded
    (dot,) = [f for f in _xla(a) if "dot" in f.ops]
    assert dot.folded and dot.hint is None
    assert dot.line == const_matmul.__code__.co_firstlineno + 1
    assert a.summary()["folded_constants"] >= 1
    assert not any(n.op == "dot" for n in a.compiled_graph.nodes)


def test_disabling_constant_folding_shows_the_matmul_unfolded():
    art = make_artifacts(
        const_matmul,
        jnp.ones((8, 8)),
        compiler_options={"xla_disable_hlo_passes": "constant_folding"},
    )
    a = analyse(art)
    (dot,) = [f for f in _xla(a) if "dot" in f.ops]
    assert not dot.folded and dot.hint


def test_iota_source_is_reported_as_not_folded():
    a = analyse(make_artifacts(arange_matmul, jnp.ones((4, 4))))
    (dot,) = [f for f in _xla(a) if "dot" in f.ops]
    assert not dot.folded
    assert "iota" in dot.ops and "iota" in dot.hint


def test_large_closed_over_array_gets_size_and_hint():
    a = analyse(make_artifacts(big_closure, jnp.ones((4,))))
    (big,) = [f for f in a.folded if f.stage == "trace"]
    assert big.name == "BIG" and big.bytes == BIG.nbytes and big.shape == "f32[10000000]"
    assert big.hint and "argument" in big.hint


def test_small_constants_get_no_hint(folded_matmul):
    assert all(f.hint is None for f in folded_matmul.folded if f.stage == "trace")


def test_ops_on_literals_folded_during_lowering():
    a = analyse(make_artifacts(literal_math, jnp.ones((4,))))
    lowering = [f for f in a.folded if f.stage == "lowering"]
    assert [f.ops for f in lowering] == [("sqrt",)]
    assert lowering[0].line == literal_math.__code__.co_firstlineno + 1


def const_projection(x):
    m = jnp.asarray(A) @ jnp.asarray(B)
    return x @ m


def test_folded_constant_matmul_feeding_another_matmul_is_reported_folded():
    # Both dots are "dot_general" ops; only their source lines tell them apart.
    a = analyse(make_artifacts(const_projection, jnp.ones((4, 8))))
    (dot,) = [f for f in _xla(a) if "dot" in f.ops]
    assert dot.folded
    off = analyse(
        make_artifacts(
            const_projection,
            jnp.ones((4, 8)),
            compiler_options={"xla_disable_hlo_passes": "constant_folding"},
        )
    )
    (dot,) = [f for f in _xla(off) if "dot" in f.ops]
    assert not dot.folded


W1 = np.random.default_rng(3).standard_normal((256, 256)).astype(np.float32)  # 256 KB each
W2 = np.random.default_rng(4).standard_normal((256, 256)).astype(np.float32)


def projected(x):
    m = jnp.asarray(W1) @ jnp.asarray(W2)  # its own line: XLA's two dots differ by line
    return x @ m


@pytest.mark.parametrize("limit", [None, 1 << 20])
def test_arrays_jax_passes_as_arguments_are_named_and_their_work_unfolded(limit):
    """JAX >= 0.12.1 passes closed-over arrays above ``jax_embedded_constants_max_bytes``
    (1 KB) to the program as arguments (``jax.const`` in the lowered module): XLA cannot fold
    ``W1 @ W2`` then, and the report says so, with the way out; with the limit raised (or on
    older JAX, which embeds every constant) XLA folds it."""
    import jax

    old = jax.config.jax_embedded_constants_max_bytes
    if limit is not None:
        jax.config.update("jax_embedded_constants_max_bytes", limit)
    try:
        x = jnp.ones((8, 256))
        passed = "jax.const" in jax.jit(projected).lower(x).as_text()  # JAX's own marker
        a = analyse(make_artifacts(projected, x))
    finally:
        jax.config.update("jax_embedded_constants_max_bytes", old)
    trace = {f.name: f for f in a.folded if f.stage == "trace" and f.name}
    assert set(trace) == {"W1", "W2"}
    work = [f for f in a.folded if "dot" in "".join(f.ops)]
    assert len(work) == 1, a.folded
    if passed:
        assert all(f.what.endswith("passed as an argument") for f in trace.values())
        assert all("jax_embedded_constants_max_bytes" in f.hint for f in trace.values())
        assert not work[0].folded and "jax_embedded_constants_max_bytes" in work[0].hint
        assert work[0].line == projected.__code__.co_firstlineno + 1
    else:
        assert not any("argument" in f.what for f in a.folded)
        assert work[0].stage == "xla" and work[0].folded
    assert a.summary()["folded_constants"] == (0 if passed else 1)
