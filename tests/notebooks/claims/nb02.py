"""Claims of 02_what_compiling_does."""

from . import Ablation, Claim
from .nb01 import FUSED

NO_FUSION = (
    "import nbcompile\n"
    "from nbcompile.measure import variants_for\n"
    "c = nbcompile.compile(layer.compilation.original, params, x, compiler_options={"
    '"xla_disable_hlo_passes": ",".join(next(v for v in variants_for("cpu") '
    'if v.name == "no_fusion").disabled)})\n'
)
JAXPR_PRIMS = "{e.primitive.name for e in c.jaxpr.jaxpr.eqns}"

CLAIMS = [
    Claim(
        "02",
        "cse-merges",
        "common-subexpression elimination computes `h - mu`, written twice, once",
        cause='sum(e.primitive.name == "sub" for e in c.jaxpr.jaxpr.eqns) == 2',
        ablation=Ablation(
            {
                "var = ((h - mu) ** 2).mean(axis=-1, keepdims=True)\n"
                "    h = (h - mu) * (1 / jnp.sqrt": "d = h - mu\n    var = (d ** 2).mean(axis=-1, "
                "keepdims=True)\n    h = d * (1 / jnp.sqrt"
            },
            why="`h - mu` written once (d = h - mu): nothing repeated for cse to merge",
            only=("%%compile", "c = layer.compilation", "log = c.passes", "def total"),
        ),
        window="exact counts",
    ),
    Claim(
        "02",
        "algsimp-rsqrt",
        "algebraic simplification turns 1 / sqrt(v) into rsqrt(v)",
        cause=f'"sqrt" in {JAXPR_PRIMS}',
        ablation=Ablation(
            {"(1 / jnp.sqrt(var + 1e-5))": "jax.lax.rsqrt(var + 1e-5)"},
            why="rsqrt written in the cell: no sqrt for algsimp to rewrite",
            only=("%%compile", "c = layer.compilation", "log = c.passes", "def total"),
        ),
        window="exact counts",
    ),
    Claim(
        "02",
        "buffers-predicted",
        "XLA allocates temporaries only for values passed between kernels: here h and a few "
        "row statistics",
        cause=FUSED,
        ablation=Ablation(
            {"c = layer.compilation\n": NO_FUSION},
            why="fusion switched off: every element-wise value is a kernel's output in memory",
            only=("%%compile", "layer.compilation.original", "pre = c.lowered"),
        ),
        window="h's bytes to h's bytes + four B-float rows (XLA's buffer assignment; exact)",
    ),
    Claim(
        "02",
        "matmul-flops",
        "the matrix product is nearly all of the arithmetic: 2·B·D·D flops, within 5 %",
        cause='sum(e.primitive.name in ("add", "mul") for e in c.jaxpr.jaxpr.eqns) < 10',
        ablation=Ablation(
            {
                "    return jax.nn.relu(h)\nlayer(params, x)": "    for _ in range(24):\n"
                "        h = h * 1.01 + 0.01\n    return jax.nn.relu(h)\nlayer(params, x)"
            },
            why="24 multiply-adds per element after the product: element-wise work is no "
            "longer small",
            only=("%%compile", "c = layer.compilation", "raw_lowered =", "pre = c.lowered"),
        ),
        window="[1, 1.05) x the hand count; XLA counts 1.6 % more (the element-wise ops)",
    ),
]
