"""Claims of 07_eager_vs_static."""

from . import Ablation, Claim

ATTENTION = "%%compile --bench\ndef attention(p, x):"
EAGER_JITTED = {
    ATTENTION: "%%compile --bench\n@jax.jit\ndef attention(p, x):",
}
NO_ALGSIMP_OPTIONS = 'compiler_options={"xla_disable_hlo_passes": "algsimp"}'

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
                "def once(f):",
            ),
        ),
        window="> 2x: measured 3.1x in turns, at load 8",
    ),
    Claim(
        "07",
        "dispatch-is-most",
        "most of what compiling saves here is dispatch: the one-call program without fusion "
        "already takes well under the eager time (less than two thirds)",
        cause='not hasattr(attention.compilation.original, "lower")',
        ablation=Ablation(
            {**EAGER_JITTED, "assert t_eager > 1.5 * t_fused": "pass"},
            why="the 'eager' function jitted too: no per-op dispatch to save",
            only=(
                "%%compile --bench\n@jax.jit",
                "b = attention.compilation.bench",
                "c = attention.compilation",
                "def once(f):",
            ),
        ),
        window="< 0.5 x eager: measured 0.39 in turns, at load 8",
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
        "XLA's algebraic simplifier rewrites 1 / sqrt(v) as rsqrt(v): the compiled values differ "
        "from the eager ones in the last bits",
        cause='"rsqrt(" in compiled_norm.as_text()',
        ablation=Ablation(
            {
                "compiled_norm = jax.jit(normalise).lower(x).compile()": (
                    "compiled_norm = jax.jit(normalise).lower(x).compile("
                    + NO_ALGSIMP_OPTIONS
                    + ")"
                )
            },
            why="compiled without XLA's algebraic simplifier (algsimp): the division stays",
            only=("def normalise",),
        ),
        window="some values differ, by < 1e-6 relative (measured 3077 of 8192, 2.2e-7)",
    ),
    Claim(
        "07",
        "checkify-catches-nan",
        "checkify's NaN check, compiled into the program, names the primitive that made the NaN",
        cause="bool(np.isnan(float(jax.jit(unstable)(x))))",
        ablation=Ablation(
            {
                "    big = jnp.exp(x * 100.0)\n    gap = big - big\n    jax.debug.print": (
                    "    big = jnp.exp(x * 1.0)\n    gap = big - big\n    jax.debug.print"
                )
            },
            why="no overflow (exp(x)): inf - inf never happens, nothing is NaN",
            only=("    jax.debug.print(",),
        ),
    ),
    Claim(
        "07",
        "debug-stops-at-the-nan",
        "--debug runs the program op by op and stops at the first NaN, with its line",
        cause="bool(np.isnan(float(unstable(x))))",
        ablation=Ablation(
            {
                "%%compile --debug -q\ndef unstable(x):\n    big = jnp.exp(x * 100.0)": (
                    "%%compile --debug -q\ndef unstable(x):\n    big = jnp.exp(x * 1.0)"
                )
            },
            why="no overflow (exp(x)): no NaN to stop at",
            only=("%%compile --debug -q\ndef unstable",),
        ),
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
