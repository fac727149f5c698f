"""Claims of 11_line_to_machine_code."""

from . import Ablation, Claim

FIRST = ("%%compile --passes", "c = mlp.compilation")
UNROLLED = "    for _ in range(96):\n        x = jax.nn.gelu(x @ w)\n"

CLAIMS = [
    Claim(
        "11",
        "tanh-lowered-once",
        "the line's gelu traces to primitives with one tanh, and lowering keeps it and the two "
        "products as StableHLO operations",
        cause='any(n.op == "tanh" for n in c.graph.nodes)',
        ablation=Ablation(
            {
                "    h = jax.nn.gelu(h @ w1)\n": "    h = jax.nn.gelu(h @ w1, approximate=False)\n",
                'assert "tanh" in [n.op for n in at_line]': "pass",
            },
            why="the exact gelu (erf): no tanh to trace or lower",
            only=(*FIRST, "at_line = ["),
        ),
        window="exact counts",
    ),
    Claim(
        "11",
        "one-library-kernel-per-product",
        "XLA:CPU's dot-library-rewriter hands each matrix product to a library kernel",
        cause='sum(e.primitive.name == "dot_general" for e in c.jaxpr.jaxpr.eqns) == 2',
        ablation=Ablation(
            {
                "    return h @ w2\nmlp(h, w1, w2)": "    return jnp.tanh(h) * 2.0\nmlp(h, w1, w2)",
            },
            why="the second product replaced by element-wise work: one product left",
            only=(*FIRST, "steps = c.passes.steps"),
        ),
        window="exact counts",
    ),
    Claim(
        "11",
        "unrolled-equations",
        "a Python loop of layers is traced as many times as it runs: the layer's line holds "
        "LAYERS times the scan body's equations",
        cause='"range(96)" in unrolled.compilation.source.text',
        ablation=Ablation(
            {UNROLLED: UNROLLED.replace("range(96)", "range(48)")},
            why="the loop runs 48 times: half the layers",
            only=("LAYERS = 96", "def unrolled", "def scanned"),
        ),
        window="exact counts",
    ),
    Claim(
        "11",
        "identical-kernels-share-code",
        "XLA:CPU compiles identical fusions once: the unrolled program's 96 gelu kernels run one "
        "kernel's code",
        cause=f"{UNROLLED!r} in unrolled.compilation.source.text",
        ablation=Ablation(
            {
                UNROLLED: "    for i in range(96):\n        x = jax.nn.gelu(x @ w * (1.0 + i / 96))\n",
                "assert eq_u == LAYERS * eq_s": "pass",
            },
            why="each layer scales by its own constant: 96 different kernels",
            only=(
                "LAYERS = 96",
                "def unrolled",
                "def scanned",
                "def body_line",
                "tu, ts = ",
                "def scaling",
            ),
        ),
    ),
]
