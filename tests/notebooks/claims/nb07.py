"""Claims of 07_eager_vs_static."""

from . import Ablation, Claim

ATTENTION = "%%compile --bench\ndef attention(p, x):"
EAGER_JITTED = {
    ATTENTION: "%%compile --bench\n@jax.jit\ndef attention(p, x):",
}
NO_ALGSIMP = '.lower(x).compile(compiler_options={"xla_disable_hlo_passes": "algsimp"})'

CLAIMS = [
    Claim(
        "07",
        "compiling-pays",
        "compiled, a block of many small ops runs faster than the same code called eagerly",
        cause='not hasattr(attention.compilation.original, "lower")',
        ablation=Ablation(
            {
                **EAGER_JITTED,
                "assert b.eager_kernels > b.compiled_kernels": "assert True or b.eager_kernels",
            },
            why="the 'eager' function jitted too: nothing is dispatched op by op",
            only=(
                "%%compile --bench\n@jax.jit",
                "b = attention.compilation.bench",
                "c = attention.compilation",
            ),
        ),
        window="> 2x: measured 3.8x at load 9",
    ),
    Claim(
        "07",
        "dispatch-is-most",
        "most of what compiling saves here is dispatch: the one-call program without fusion "
        "already takes less than half the eager time",
        cause='not hasattr(attention.compilation.original, "lower")',
        ablation=Ablation(
            {**EAGER_JITTED, "assert b.speedup > 2": "pass"},
            why="the 'eager' function jitted too: no per-op dispatch to save",
            only=(
                "%%compile --bench\n@jax.jit",
                "b = attention.compilation.bench",
                "c = attention.compilation",
            ),
        ),
        window="< 0.5 x eager: measured 0.24",
    ),
    Claim(
        "07",
        "matmul-bound-gains-little",
        "a model whose arithmetic is in a few large matmuls gains (almost) nothing from compiling",
        cause="2 * big.shape[0] * big.shape[1] * W1.shape[1] > 1e8",
        ablation=Ablation(
            {
                "W1 = jnp.asarray(rng.normal(size=(1024, 1024)) / 32, jnp.float32)": (
                    "W1 = jnp.asarray(rng.normal(size=(16, 16)) / 4, jnp.float32)"
                ),
                "W2 = jnp.asarray(rng.normal(size=(1024, 1024)) / 32, jnp.float32)": (
                    "W2 = jnp.asarray(rng.normal(size=(16, 16)) / 4, jnp.float32)"
                ),
                "big = jnp.asarray(rng.normal(size=(512, 1024)), jnp.float32)": (
                    "big = jnp.asarray(rng.normal(size=(8, 16)), jnp.float32)"
                ),
                "    return jnp.maximum(big @ W1, 0.0) @ W2\n": (
                    "    h = jnp.maximum(big @ W1, 0.0) @ W2\n    for _ in range(10):\n"
                    "        h = jnp.tanh(h) * 0.9 + 0.1\n    return h\n"
                ),
            },
            why="the MLP shrunk to 8x16 @ 16x16 with ten element-wise steps after it: small "
            "ops, all dispatch",
            only=(
                "%%compile --bench\ndef attention",
                "b = attention.compilation.bench",
                "W1 = ",
                "def mlp",
            ),
        ),
        window="< 1.25: measured 0.92-1.05",
    ),
    Claim(
        "07",
        "print-runs-at-trace",
        "inside a compiled function Python runs once, on tracers: print shows a tracer, once",
        cause='hasattr(step, "lower")',
        ablation=Ablation(
            {"step = jax.jit(unstable)": "step = unstable"},
            why="the function not compiled: its Python runs at every call, on arrays",
            only=("seen = []",),
        ),
    ),
    Claim(
        "07",
        "xla-rewrites-numerics",
        "XLA's algebraic simplifier rewrites exp(a) / exp(a): the compiled program has no NaN "
        "where the eager one does",
        cause='"divide(" not in (step if hasattr(step, "as_text") else step.lower(x).compile()).as_text()',
        ablation=Ablation(
            {"step = jax.jit(unstable)": "step = jax.jit(unstable)" + NO_ALGSIMP},
            why="compiled without XLA's algebraic simplifier (algsimp)",
            only=("seen = []", "answer: {len(seen)}"),
        ),
    ),
    Claim(
        "07",
        "checkify-nan-misses",
        "checkify's checks are compiled too: its NaN check on the rewritten division finds nothing",
        cause='"divide(" not in (lambda f: f if hasattr(f, "as_text") else f.lower(x).compile())('
        'checked["NaN checks"]).as_text()',
        ablation=Ablation(
            {
                "    checked[name] = jax.jit(checkify.checkify(unstable, errors=errors))": (
                    "    checked[name] = jax.jit(checkify.checkify(unstable, errors=errors))"
                    + NO_ALGSIMP
                ),
            },
            why="the checked program compiled without algsimp: the division is there and NaN",
            only=(
                "def unstable(x):\n    big = jnp.exp(x * 100.0)\n    ratio = big / big\n    jax.debug",
            ),
        ),
        control='"division by zero" in found["checkify (division checks)"]',
    ),
    Claim(
        "07",
        "nbc201-names-the-fix",
        "Python control flow on a traced argument raises; nbcompile names the line and --static",
        cause="jax_error is not None",
        ablation=Ablation(
            {
                "    jax.jit(layer)(x, True)": '    jax.jit(layer, static_argnames="use_relu")(x, True)',
                "    nbcompile.compile(layer, x, True)": (
                    '    nbcompile.compile(layer, x, True, static_argnames="use_relu")'
                ),
            },
            why="use_relu marked static: the if runs on a Python bool",
            only=("def layer(x, use_relu):\n    h = x @ p",),
        ),
    ),
]
