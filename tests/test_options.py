"""--bench, --ablate, --debug, --backend/--topology through the magic (real IPython shell)."""

from __future__ import annotations

import numpy as np
import pytest

SETUP = """
import jax, jax.numpy as jnp, numpy as np
rng = np.random.default_rng(0)
x = jnp.asarray(rng.normal(size=(64, 64)), jnp.float32)
w = jnp.asarray(rng.normal(size=(64, 64)) / 8, jnp.float32)
"""

BLOCK = """%%compile -q {opts}
def block(x, w):
    h = x @ w
    h = h - h.mean(axis=-1, keepdims=True)
    h = h / jnp.sqrt((h * h).mean(axis=-1, keepdims=True) + 1e-5)
    return jax.nn.softmax(jax.nn.gelu(h) * 1.5, axis=-1)
block(x, w)
"""


@pytest.fixture
def ip(shell):
    shell.reset(new_session=False)
    assert shell.run_cell(SETUP).success
    return shell


def compiled(ip, opts: str):
    res = ip.run_cell(BLOCK.format(opts=opts))
    assert res.success, res.error_in_exec
    return ip.user_ns["block"].compilation


def test_bench_reports_kernels_and_speedup(ip):
    c = compiled(ip, "--bench")
    bench = c.extras["bench"]
    assert bench["eager_kernels"] > bench["compiled_kernels"] > 0
    assert bench["speedup"] > 0 and bench["compile_seconds"] > 0
    assert c.timings["eager_call"] == bench["eager"]["median"] > 0
    assert c.timings["compiled_call"] == bench["compiled"]["median"] > 0
    report = c.report()
    assert "bench" in report["extras"]
    assert "eager" in repr(c).lower()


def test_ablate_shows_fusion_off_means_more_kernels(ip):
    c = compiled(ip, "--ablate")
    variants = {v["name"]: v for v in c.extras["ablate"]["variants"]}
    base = variants["baseline"]
    off = variants["no_fusion"]
    assert off["changed"] and off["kernels"] > base["kernels"]


def test_debug_keeps_every_intermediate(ip):
    c = compiled(ip, "--debug")
    d = c.debug
    assert not d.stopped
    n_eqns = len(c.jaxpr.jaxpr.eqns)
    assert len(d.summaries) >= n_eqns
    out = np.asarray(ip.user_ns["block"](ip.user_ns["x"], ip.user_ns["w"]))
    np.testing.assert_allclose(np.asarray(d.outputs[0]), out, rtol=1e-5, atol=1e-6)


def test_debug_finds_the_nan_line(ip, capsys):
    res = ip.run_cell(
        "%%compile -q --debug\ndef bad(x):\n    y = jnp.exp(x * 1000.0)\n"
        "    z = y - y\n    return z.sum()\nbad(x)\n"
    )
    assert res.success, res.error_in_exec
    d = ip.user_ns["bad"].compilation.debug
    assert d.stopped and d.nan_at["primitive"] == "sub" and d.nan_at["line"] == 4
    assert "line 4" in capsys.readouterr().err


def test_tpu_deviceless_through_the_magic(ip):
    res = ip.run_cell(
        "%%compile -q --backend tpu --topology v5e:2x2\n"
        "def mlp(x, w):\n    return jnp.tanh(x @ w) * 2.0\nmlp(x, w)\n"
    )
    assert res.success, res.error_in_exec
    # compiled for a device that is not here: the Python function stays as it was
    fn = ip.user_ns["mlp"]
    assert type(fn).__name__ == "function"
    import nbcompile

    c = nbcompile.last()
    assert c.backend == "tpu" and c.cost and c.cost.get("optimal_seconds")
    assert any(f.source_lines for f in c.fusions)


def _most_ops_in_one_kernel(text: str) -> int:
    """The most operations (not parameters) any fusion of an optimised module computes."""
    from nbcompile.analysis.hlo import parse_hlo

    module = parse_hlo(text)
    entry = module.entry_computation
    most = 0
    for instr in entry.instructions if entry else []:
        if instr.opcode == "fusion":
            for name in instr.called:
                body = module.computations[name].instructions
                most = max(most, sum(1 for i in body if i.opcode != "parameter"))
    return most


def test_compiler_options_shape_the_bound_function_too():
    """c.fn must run the program that was compiled: options live on the jit object itself."""
    import jax.numpy as jnp

    import nbcompile

    def chain(x, *, scale):
        return jnp.tanh(x * scale + 1.0) * 3.0

    x = jnp.ones((64, 64), jnp.float32)
    off = {"xla_disable_hlo_passes": "fusion,fusion-wrapper"}
    c = nbcompile.compile(
        chain, x, example_kwargs={"scale": jnp.float32(2.0)}, compiler_options=off
    )
    # nothing fused: JAX 0.10.2 leaves the ops bare; JAX 0.12's XLA:CPU wraps each op in a
    # one-op kernel whatever ``fusion-wrapper`` says
    assert _most_ops_in_one_kernel(c.hlo) <= 1
    assert (
        _most_ops_in_one_kernel(
            nbcompile.compile(chain, x, example_kwargs={"scale": jnp.float32(2.0)}).hlo
        )
        > 1
    )  # positive control: on, the chain is one kernel
    again = c.fn.lower(x, scale=jnp.float32(2.0)).compile().as_text()
    assert _most_ops_in_one_kernel(again) <= 1, "the bound function compiles another program"
    ablation = c.run_ablation()  # keyword arguments reach every variant's timed calls
    assert all(v.time is not None for v in ablation.variants if v.error is None)
    assert not any("timing failed" in n for n in ablation.notes), ablation.notes


def test_grad_of_a_loss_returning_loss_and_aux_differentiates_the_loss():
    """Flax's and Keras' own loss functions return (loss, aux): --grad uses has_aux."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import nbcompile

    def loss_fn(w, x):
        logits = jnp.tanh(x @ w)
        return jnp.mean(logits**2), logits

    w, x = jnp.ones((3, 4), jnp.float32), jnp.ones((2, 3), jnp.float32)
    c = nbcompile.compile(loss_fn, w, x, grad=0)
    assert any("has_aux" in n for n in c.notes)
    (value, aux), grads = c.grad.fn(w, x)
    (want, want_aux), want_grads = jax.value_and_grad(loss_fn, has_aux=True)(w, x)
    np.testing.assert_allclose(value, want, rtol=1e-6)
    np.testing.assert_allclose(aux, want_aux, rtol=1e-6)
    np.testing.assert_allclose(grads, want_grads, rtol=1e-6)


def test_debug_says_when_the_compiled_program_differs_from_op_by_op():
    """exp(a)/exp(a): XLA rewrites it to exp(a - a) (finite) while op by op overflows to NaN
    (JAX 0.12's XLA:CPU only with fast math: the compiler options reach the comparison)."""
    import jax.numpy as jnp

    import nbcompile

    def unstable(x):
        big = jnp.exp(x * 100.0)
        return (big / big).sum()

    c = nbcompile.compile(
        unstable,
        jnp.linspace(-1.0, 1.0, 64, dtype=jnp.float32),
        compiler_options={"xla_cpu_enable_fast_math": True},
    )
    d = c.run_debug()
    assert d.divergence is not None and d.divergence.differs
    assert any("computes something different" in n for n in c.notes), c.notes
