"""Claims of 01_quickstart."""

from . import Ablation, Claim

NO_FUSION = (
    "import nbcompile\n"
    "from nbcompile.measure import variants_for\n"
    "c = nbcompile.compile(predict.compilation.original, params, x, compiler_options={"
    '"xla_disable_hlo_passes": ",".join(next(v for v in variants_for("cpu") '
    'if v.name == "no_fusion").disabled)})\n'
    "print(type"
)
FIRST_BODY = 'h = x @ params["w1"] + params["b1"]\n    h = jax.nn.gelu(h)\n'

#: a kernel of several ops: with fusion off, JAX 0.12's XLA still wraps each op in a one-op
#: "fusion" (a reduce with its combiner, two ops), so a fusion's kind alone says nothing
FUSED = 'any(f.kind == "loop" and len(f.ops) - 2 * f.ops.count("reduce") > 1 for f in c.fusions)'

CLAIMS = [
    Claim(
        "01",
        "fewer-kernels",
        "XLA runs the cell as fewer kernels than op-by-op execution dispatches: it fused ops",
        cause=FUSED,
        ablation=Ablation(
            {
                "c = predict.compilation\nprint(type": NO_FUSION,
                "assert len(raw_kernels) == c.summary()": "assert True or len(raw_kernels) == c.summary()",
            },
            why="the cell compiled with XLA's fusion passes switched off: nothing fused",
            only=("%%compile\ndef predict", "predict.compilation", "raw = jax.jit"),
        ),
    ),
    Claim(
        "01",
        "kernel-lines",
        "each kernel names the cell lines its ops came from: gelu's kernel lines 3 and 4",
        cause='"gelu" in c.source.lines[3] and "+ params" in c.source.lines[2]',
        ablation=Ablation(
            {FIRST_BODY: 'h = jax.nn.gelu(x @ params["w1"] + params["b1"])\n    h = h\n'},
            why="gelu written on line 3 with the bias add: its kernel can only name line 3",
            only=("%%compile\ndef predict", "c = predict.compilation"),
        ),
    ),
    Claim(
        "01",
        "rerun-free",
        "re-running an unchanged cell does not compile again",
        cause="predict.compilation.source.lines[1:] == c.source.lines[1:]",
        ablation=Ablation(
            {
                "%%compile -q\ndef predict(params, x):\n    " + FIRST_BODY: (
                    "%%compile -q\ndef predict(params, x):\n    "
                    + FIRST_BODY.replace("gelu(h)", "gelu(h * 2.0)")
                )
            },
            why="the re-run cell changed (gelu of 2h): the program differs and must compile",
            only=(
                "%%compile\ndef predict",
                "c = predict.compilation",
                "events = []",
                "%%compile -q",
            ),
        ),
        control="compiles_edited >= 1",
        window="exactly 0 compiles (a count, no tolerance)",
    ),
]
