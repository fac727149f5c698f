"""Claims of 05_hardware_targets (deviceless TPU compiles: libtpu)."""

from . import Ablation, Claim

TPU_CELL = (
    "%%compile -q --backend tpu --topology v5e:2x2\ndef mlp(params, x):\n"
    '    h = jax.nn.gelu(x @ params["w1"])\n'
    '    return jax.nn.softmax(h @ params["w2"], axis=-1)\n'
)
SWEEP = (
    "%%compile -q\ndef mlp",
    "%%compile -q --backend tpu",
    "cpu = nbcompile.compile",
    "v5e = spec_peaks",
    "D = 8192",
    "xla_bytes = lambda",
    "for B, r in sweep.items()",
)

CLAIMS = [
    Claim(
        "05",
        "tpu-stores-bf16",
        "compiled for a TPU, XLA stores an activation that only feeds a matmul in bfloat16 (the "
        "MXU multiplies in bf16 at JAX's default precision); the CPU program has no bf16",
        cause='"HIGHEST" not in tpu.lowered.as_text()',
        ablation=Ablation(
            {
                TPU_CELL: TPU_CELL.replace(
                    'h @ params["w2"]', 'jnp.dot(h, params["w2"], precision="highest")'
                )
            },
            why="the second product at full f32 precision: the MXU must read h in f32",
            only=(
                "%%compile -q\ndef mlp",
                "%%compile -q --backend tpu",
                "cpu = nbcompile.compile",
                "bf16 = [ln",
            ),
        ),
    ),
    Claim(
        "05",
        "xla-estimate-is-a-roofline",
        "XLA's TPU time estimate is a roofline: bytes over a fixed fraction of the HBM bandwidth "
        "below the ridge, FLOPs over a fixed fraction of the MXU peak above it (model against "
        "model)",
        cause='all(r["roof"] == max(r["bytes"] / v5e.bytes_per_s.value, r["flops"] / '
        "v5e.flops_per_s.value) for r in sweep.values())",
        ablation=Ablation(
            {'r["roof"] = max(': 'r["roof"] = min('},
            why="the roofline as the smaller of the two times: no ridge in the model",
            only=SWEEP,
        ),
        window="each side's fraction constant to 0.1 % (measured: 90.0 % and 88.5 %, exact)",
    ),
    Claim(
        "05",
        "ridge-crossing",
        "the batch where a bf16 layer crosses the v5e ridge is predicted from its shapes and "
        "XLA's byte counts",
        cause="w_spec.dtype == jnp.bfloat16",
        ablation=Ablation(
            {
                "w_spec = jax.ShapeDtypeStruct((D, D), jnp.bfloat16)": (
                    "w_spec = jax.ShapeDtypeStruct((D, D), jnp.float32)"
                ),
                'assert all(abs(sweep[B]["bytes"] / xla_bytes(B) - 1) < 1e-3 for B in sweep)': "pass",
            },
            why="the layer in float32: four bytes a value, the crossing moves",
            only=SWEEP,
        ),
        window="between the sweep's neighbouring batches (256 < 292 < 384)",
    ),
    Claim(
        "05",
        "allreduce-bytes",
        "on a 4×2 mesh the partial sums of h @ w2 are all-reduced: 32 × 512 × 4 bytes per "
        "device, predicted from the shapes and the sharding",
        cause='"params.w2: global [1024, 512] → per device [512, 512]" in '
        'sharded.extras["target"]["text"]',
        ablation=Ablation(
            {
                "params.w2=model,None\n": "params.w2=None,model\n",
                'assert shapes == [f"f32[{rows},{out_cols}]"]': "pass",
                "assert shapes == re.findall(": "assert True or shapes == re.findall(",
            },
            why="w2 split by its columns: the contraction over the hidden units is local, no "
            "partial sums",
            only=("%%compile -q --mesh", "sharded = nbcompile.last()", "rows, out_cols"),
        ),
        window="exact",
    ),
]
