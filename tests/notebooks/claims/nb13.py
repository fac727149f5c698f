"""Claims of 13_inside_the_loop (a lax.scan over stacked layers, a lax.cond every fourth)."""

from . import Ablation, Claim

#: the jaxpr of one layer, its arguments abstract (the layer index traced, as inside the scan)
LAYER_JAXPR = (
    "jax.make_jaxpr(layer)(x, jax.tree.map(lambda a: a[0], stack), jnp.int32(3)).jaxpr.eqns"
)
#: the scan equation JAX hands to XLA for forward_unrolled(..., k=2)
SCAN_2 = (
    "next(e for e in jax.make_jaxpr(lambda s, x: forward_unrolled(s, x, 2))(stack, x).jaxpr.eqns"
    ' if e.primitive.name == "scan")'
)

CLAIMS = [
    Claim(
        "13",
        "body-once-per-layer",
        "XLA compiles a scan's body once and runs it once per iteration: every kernel of the "
        "body's own runs LAYERS times per call",
        cause="loop.xla_trip_count == LAYERS",
        ablation=Ablation(
            {
                "(stack, jnp.arange(LAYERS)))\n    return h": (
                    "(stack, jnp.arange(LAYERS)), unroll=2)\n    return h"
                )
            },
            why="the scan unrolled twice: XLA's loop runs LAYERS / 2 times, two bodies each",
            only=("%%compile --profile", "c = forward.compilation"),
        ),
        window="exact counts",
    ),
    Claim(
        "13",
        "wide-layers-slow",
        "each iteration's time is measured: the wide layers (nine products) are the slow ones, "
        "by at least half the factor predicted from XLA's flops",
        cause="wide_flops > 2 * narrow_flops",
        ablation=Ablation(
            {
                "for _ in range(8):": "for _ in range(0):",
                "assert branch": "pass",
                "assert 8 < predicted < 10": "pass",
                "assert sorted(slowest) == wide_layers": "pass",
            },
            why="the wide branch does no extra product: every layer does the same work",
        ),
        window="min wide > 2x the median narrow and measured > predicted / 2 (predicted 9.0; "
        "measured 9.3x on JAX 0.12, 8.1x on 0.10.2, 2 cores with a CPU burner beside it)",
    ),
    Claim(
        "13",
        "unroll-divides-trips",
        "unroll=k puts k bodies in each iteration: XLA's loop runs LAYERS / k times",
        cause=f'{SCAN_2}.params["unroll"] == 2',
        ablation=Ablation(
            {"unroll=k)[0]": "unroll=1)[0]"},
            why="no unroll reaches JAX: the scan is handed to XLA with unroll=1 whatever k says",
            only=("%%compile --profile", "def forward_unrolled"),  # the claim's cell: runs = {}
        ),
        window="exact counts",
    ),
    Claim(
        "13",
        "cond-keeps-wide-residuals",
        "a lax.cond in a scan keeps its wide branch's residuals in every iteration: at least "
        "18 batch x width arrays per layer, for every layer",
        cause=f'any(e.primitive.name == "cond" for e in {LAYER_JAXPR})',
        ablation=Ablation(
            {
                "return jax.lax.cond(i % 4 == 3, wide, lambda h: h, h)": "return h",
                'assert bwd_loop.reverse and m.peak_source == "estimate" and "branch" in '
                "m.notes[-1]": "pass",
            },
            why="no lax.cond in the layer: only its own product's input and tanh output are kept",
            only=("%%compile --profile", "%%compile --grad", "g = loss.compilation"),
        ),
        window="[1, 2) x the wide branch's count (measured 18 arrays, 1.0x, on JAX 0.12; 21 "
        "arrays, 1.17x, on 0.10.2: that JAX keeps more intermediates)",
    ),
]
