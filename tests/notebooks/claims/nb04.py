"""Claims of 04_autodiff."""

from . import Ablation, Claim

GRAD_X_TOO = {"%%compile --grad\ndef loss": "%%compile --grad 0,1\ndef loss"}
FIRST_CELLS = (
    "%%compile --grad\ndef loss",
    "%%compile --grad 0,1\ndef loss",
    "back = [",
    "dots = {}",
)

CLAIMS = [
    Claim(
        "04",
        "one-product-per-operand",
        "autodiff gives each matrix product one backward product per differentiated operand",
        cause="c.grad_argnums == (0,)",
        ablation=Ablation(
            GRAD_X_TOO,
            why="x differentiated too (--grad 0,1): layer one's product gets dx as well",
            only=FIRST_CELLS,
        ),
        window="exact counts",
    ),
    Claim(
        "04",
        "grad-flops-predicted",
        "the gradient's flops follow from the shapes: the forward, three more products and "
        "tanh's derivative",
        cause="c.grad_argnums == (0,)",
        ablation=Ablation(
            {**GRAD_X_TOO, "assert sorted(dots.values()) == [1, 2]": "pass"},
            why="x differentiated too (--grad 0,1): one more product than predicted",
            only=FIRST_CELLS,
        ),
        window="1 %: XLA counts 0.17 % more (the loss's derivative, a few flops per row)",
    ),
    Claim(
        "04",
        "grad-matches-fd",
        "the compiled gradient equals central finite differences of the loss",
        cause='"stop_gradient" not in str(c.grad.jaxpr)',
        ablation=Ablation(
            {
                '    h = jnp.tanh(x @ params["w1"])\n    pred = h @ params["w2"]': (
                    '    h = jnp.tanh(x @ jax.lax.stop_gradient(params["w1"]))\n'
                    '    pred = h @ params["w2"]'
                )
            },
            why="w1 behind stop_gradient: autodiff no longer differentiates through it",
            only=("%%compile --grad\ndef loss", "c = loss.compilation"),
        ),
        window="rtol 2 %, atol 1e-3 at eps 1e-2 (float32)",
    ),
    Claim(
        "04",
        "residuals-per-layer",
        "each tanh layer keeps for its own backward pass what tanh's derivative reads: 1 − a² "
        "(and a, if JAX's rule computes it from a): one or two B × W float32 tensors, bounded "
        "by the chain rule; nbcompile's per-layer bytes equal JAX's print_saved_residuals",
        cause='any(e.primitive.name == "tanh" for e in jax.make_jaxpr(layer)(ws[0], h0).eqns)',
        ablation=Ablation(
            {"return jnp.tanh(h @ w)": "return h @ w"},
            why="no tanh in the layer: nothing of 1 − a² to keep",
            only=("B2, W, DEPTH", "def deep_loss"),
        ),
        window="exact bytes (JAX 0.10.2 keeps a and 1 − a², 0.12 keeps 1 − a² alone)",
    ),
]
