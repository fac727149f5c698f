"""Claims of 10_will_it_fit."""

from . import Ablation, Claim

BLOCK_BODY = "        z = self.norm(self.proj(h))\n        return h + jax.nn.gelu(z)\n"
OPTIONS = "bigger = memory_options(c, batch_size=2 * batch, policies=(), donate=False"

CLAIMS = [
    Claim(
        "10",
        "residuals-predicted",
        "a training step's peak is mostly residuals, predicted from the shapes: each block's "
        "input and matrix product, 2·depth − 1 batch × width arrays",
        cause='"checkpoint" not in str(c.jaxpr) and "remat" not in str(c.jaxpr)',
        ablation=Ablation(
            {
                BLOCK_BODY: "        return nnx.remat(lambda b, h: h + jax.nn.gelu(b.norm(b.proj(h))))"
                "(self, h)\n"
            },
            why="every block rematerialised in the model itself (nnx.remat): it keeps only its "
            "input",
            only=(
                "class Block",
                "width, depth",
                "unit = batch",
                "%%compile",
                "c = nbcompile.last()",
            ),
        ),
        window="1 % (XLA's map matched the count to 0.0 %)",
    ),
    Claim(
        "10",
        "remat-fits",
        "at twice the batch the step as written does not fit a v5e chip, and with per-block "
        "remat it does",
        cause="big_pred > m.capacity_bytes",
        ablation=Ablation(
            {
                "batch = 196608": "batch = 65536",
                "assert big_pred > m.capacity_bytes > m.peak_bytes": "pass",
            },
            why="a third of the batch: twice of it fits as written",
            only=(
                "class Block",
                "width, depth",
                "unit = batch",
                "%%compile",
                "c = nbcompile.last()",
                "big_pred =",
                "class RematBlock",
            ),
        ),
    ),
    Claim(
        "10",
        "remat-costs-a-forward",
        "per-block remat costs one more forward pass: 4·depth − 1 products instead of 3·depth − 1",
        cause='remat.name.startswith("remat per layer")',
        ablation=Ablation(
            {
                "big_batch = 2 * batch": "big_batch = batch",
                OPTIONS.replace("2 * batch", "big_batch"): OPTIONS.replace(
                    "2 * batch", "big_batch"
                ).replace("policies=()", 'policies=("dots_saveable",)'),
                "plain, remat = bigger.baseline, bigger.options[0]": (
                    'plain, remat = bigger.baseline, next(o for o in bigger.options if "dots" in o.name)'
                ),
                'assert remat.name.startswith("remat per layer") and "Block" in remat.name': "pass",
                "assert plain.fits is False and remat.fits is True": "pass",
                "assert remat_least <= remat.peak_bytes <= 1.01 * remat_pred": "pass",
            },
            why="the matrix products saved (checkpoint policy dots_saveable, at the first batch, "
            "where it fits): the backward recomputes only the element-wise work",
            only=(
                "class Block",
                "width, depth",
                "unit = batch",
                "%%compile",
                "c = nbcompile.last()",
                "big_pred =",
                "class RematBlock",
                "bigger = memory_options",
                "product = 2 * batch",
            ),
        ),
        window="[1, 1.02) x the products' count: XLA counts 0.7-1 % more (element-wise work)",
    ),
]
