# %% md
# # 05 · Compilation is hardware-specific: CPU, TPU, GPU and device meshes
#
# **You will learn** that the same model compiles to different programs for different hardware
# — different ops, memory layouts, number formats and data movement — why, and how to see them
# side by side on any machine: nbcompile compiles for a TPU *without a TPU* (deviceless,
# through libtpu), for a GPU without a GPU (through the CUDA plugin, when installed), and for a
# mesh of 8 devices.

# %% code
import os
# This notebook compiles for hardware that is not here, so JAX itself runs on this machine's
# CPU (even where a GPU is present), split into 8 virtual devices for the mesh section. Both
# must be set before JAX starts.
os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
%load_ext nbcompile
import collections, re
import jax, jax.numpy as jnp, numpy as np
import nbcompile
from nbcompile.measure import spec_peaks

rng = np.random.default_rng(0)
params = {"w1": jnp.asarray(rng.normal(size=(512, 1024)) / 22, jnp.float32),
          "w2": jnp.asarray(rng.normal(size=(1024, 512)) / 32, jnp.float32)}
x = jnp.asarray(rng.normal(size=(128, 512)), jnp.float32)
print(jax.devices())

# %% code
%%compile -q
def mlp(params, x):
    h = jax.nn.gelu(x @ params["w1"])
    return jax.nn.softmax(h @ params["w2"], axis=-1)
mlp(params, x)

# %% md
# ## The same model for a TPU v5e, deviceless
# `--backend tpu --topology v5e:2x2` compiles with the real TPU compiler (from `libtpu`, the
# `nbcompile[tpu]` extra) although no TPU is attached. The result cannot run here, but its
# program, kernels and XLA's cost model are real.

# %% code
%%compile -q --backend tpu --topology v5e:2x2
def mlp(params, x):
    h = jax.nn.gelu(x @ params["w1"])
    return jax.nn.softmax(h @ params["w2"], axis=-1)
mlp(params, x)

# %% code
cpu = nbcompile.compile(mlp, params, x)
tpu = nbcompile.last()
print(nbcompile.compare(cpu, tpu).text())

def opcodes(hlo):
    """How often each HLO op appears (an op name followed by its operand list)."""
    return collections.Counter(re.findall(r"\s([a-z][\w-]*)\((?=%|\))", hlo))

ops_cpu, ops_tpu = opcodes(cpu.hlo), opcodes(tpu.hlo)
print("\nops only the TPU program has:", sorted(set(ops_tpu) - set(ops_cpu)))
print("ops only the CPU program has:", sorted(set(ops_cpu) - set(ops_tpu)))

# %% md
# **What differs, and why.** Three TPU features show up in its program:
# - **bfloat16.** The TPU's matrix unit (MXU) multiplies in bfloat16 at JAX's default
#   precision, so XLA stores the hidden activation, which only feeds the second matmul, as
#   `bf16` — half the bytes to write and read back. (`convert` ops do it.)
# - **Tiled layouts.** Arrays are stored in `T(8,128)` tiles, matching the vector registers
#   (8 sublanes × 128 lanes); a dimension that is not a multiple of the tile is padded.
# - **Asynchronous copies.** `copy-start` / `copy-done` move the second weight matrix into
#   on-chip memory (memory space `S(1)`) while the first matmul runs, instead of waiting.
#
# And matrix products appear as `convolution`, the op XLA:TPU lowers them to.

# %% code
bf16 = [ln.strip()[:100] for ln in tpu.hlo.splitlines() if re.search(r"= bf16\[\S* convert\(", ln)]
arrays = re.findall(r"= (?:f32|bf16)\[[\d,]+\]\{([^}]*)\}", tpu.hlo)
tiled = sum("T(8,128)" in layout for layout in arrays)
print(f"bf16 converts: {len(bf16)}, e.g. {bf16[:1]}")
print(f"arrays in T(8,128) tiles: {tiled} of {len(arrays)}; in the CPU program: "
      f"{cpu.hlo.count('T(8,128)')}")
print(f"async copies: {ops_tpu['copy-start']} copy-start / {ops_tpu['copy-done']} copy-done; "
      f"dots as convolutions: {ops_tpu['convolution']}")

# %% code
assert tpu.backend == "tpu" and cpu.hlo != tpu.hlo
assert bf16 and "bf16" not in cpu.hlo  # claim: tpu-stores-bf16
assert tiled > len(arrays) / 2 and "T(8,128)" not in cpu.hlo   # layout
assert ops_tpu["copy-start"] >= 1 and ops_tpu["copy-done"] >= 1 and not ops_cpu["copy-start"]
assert ops_tpu["convolution"] >= 2 and ops_cpu["convolution"] == 0
assert any(f.source_lines for f in tpu.fusions)

# %% md
# ## The roofline, on XLA's own TPU numbers
# XLA's TPU cost model says how many FLOPs the program does and how many bytes it moves
# (`c.cost` is JAX's `compiled.cost_analysis()`, normalised). Their ratio, the arithmetic
# intensity, against the chip's ridge (peak FLOP/s ÷ HBM bytes/s, from the v5e datasheet)
# says what limits it — and the roofline, the larger of bytes ÷ bandwidth and FLOPs ÷ peak,
# is a time. XLA's cost model gives its own time estimate (`optimal_seconds`). Both are
# *models*: comparing them checks that they agree on what limits the program, not that either
# is what a TPU measures (there is no TPU here).

# %% code
v5e = spec_peaks("tpu", "v5e")
raw = tpu.compiled.cost_analysis()   # the raw JAX call behind tpu.cost
raw = raw[0] if isinstance(raw, list) else raw
intensity = tpu.cost["flops"] / tpu.cost["bytes_accessed"]
memory_time = tpu.cost["bytes_accessed"] / v5e.bytes_per_s.value
compute_time = tpu.cost["flops"] / v5e.flops_per_s.value
print(f"{tpu.cost['flops'] / 1e6:.0f} MFLOP, {tpu.cost['bytes_accessed'] / 1e6:.1f} MB (XLA; "
      f"cost_analysis(): {raw['flops'] / 1e6:.0f} MFLOP, {raw['bytes accessed'] / 1e6:.1f} MB): "
      f"{intensity:.1f} FLOP/byte; v5e ridge {v5e.ridge:.0f} FLOP/byte ({v5e.bytes_per_s.source}: "
      f"{v5e.bytes_per_s.detail}) → memory-bound")
print(f"bytes / HBM bandwidth = {memory_time * 1e6:.1f} µs, FLOPs / peak = "
      f"{compute_time * 1e6:.1f} µs; XLA's estimate: {tpu.cost['optimal_seconds'] * 1e6:.1f} µs "
      f"(×{tpu.cost['optimal_seconds'] / memory_time:.2f} the roofline)")
assert raw["flops"] == tpu.cost["flops"] and raw["bytes accessed"] == tpu.cost["bytes_accessed"]
assert intensity < v5e.ridge and memory_time > compute_time

# %% md
# **Crossing the ridge.** A small batch cannot keep a TPU's matrix unit busy: every weight
# byte read is used by only `B` rows. Sweep the batch of one `B×D @ D×D` layer in bf16 (2
# bytes a value), as the scaling book does. Counting each array once — the weight `D²`, the
# activation and the output `B·D` each — its intensity is `2·B·D² / (2·(2·B·D + D²))`.
# XLA's cost model counts what its *tiled* kernel moves, operand by operand
# (`cost_analysis()` has a figure per operand): read them off, and predict with them.

# %% code
D = 8192
w_spec = jax.ShapeDtypeStruct((D, D), jnp.bfloat16)
sweep = {}
for B in (64, 128, 256, 384, 512, 1024):
    a_spec = jax.ShapeDtypeStruct((B, D), w_spec.dtype)
    cost = nbcompile.compile(lambda w, a: a @ w, w_spec, a_spec, backend="tpu", topology="v5e:2x2").cost
    sweep[B] = {"flops": cost["flops"], "bytes": cost["bytes_accessed"],
                "xla": cost["optimal_seconds"], "a": a_spec.size * 2, "w": w_spec.size * 2,
                "operands": {k[len("bytes_accessed_"):]: v for k, v in cost.items()
                             if k.startswith("bytes_accessed_")}}
print("XLA's bytes per operand of its kernel, in units of the activation's size B·D·2:")
for B, r in sweep.items():
    print(f"  batch {B:>5}: " + ", ".join(f"{k} {v / r['a']:.2f}" for k, v in sorted(r["operands"].items()))
          + f"  (the weight is {r['w'] / r['a']:.0f} units)")

# %% md
# **Predict first.** The weight is counted once, at its size, at every batch. What multiples of
# the activation's size does XLA count for the activation and for the output? Use them to
# write XLA's bytes as a formula in `B` and `D`, then the batch where its intensity reaches the
# ridge — the hidden cell checks your formula against every XLA count.

# %% code hide
xla_bytes = lambda B: 2 * (D * D + 2 * B * D + 4 * B * D)  # noqa: E731  w once, a twice, out 4x
crossing_pred = v5e.ridge * D / (D - 6 * v5e.ridge)   # B·D² / (D² + 6·B·D) = ridge
print(f"answer: the activation twice and the output four times (XLA's tiled kernel streams "
      f"them more than once; XLA does not say why): bytes = 2·(D² + 6·B·D), within "
      f"{max(abs(sweep[B]['bytes'] / xla_bytes(B) - 1) for B in sweep):.1e} of every XLA count; "
      f"intensity B·D² / (D² + 6·B·D) reaches the ridge at batch {crossing_pred:.0f} (counting "
      f"each array once: {v5e.ridge * D / (D - 2 * v5e.ridge):.0f})")
assert all(abs(sweep[B]["bytes"] / xla_bytes(B) - 1) < 1e-3 for B in sweep)

# %% code
for B, r in sweep.items():
    r["intensity"] = r["flops"] / r["bytes"]
    r["roof"] = max(r["bytes"] / v5e.bytes_per_s.value, r["flops"] / v5e.flops_per_s.value)
    print(f"batch {B:>5}: {r['intensity']:6.1f} FLOP/byte (each array once {B * D / (2 * B + D):6.1f}) "
          f"{'compute' if r['intensity'] > v5e.ridge else 'memory':>7}-bound; roofline "
          f"{r['roof'] * 1e6:7.1f} µs, XLA's estimate {r['xla'] * 1e6:7.1f} µs (×{r['xla'] / r['roof']:.3f})")
memory_side = max(B for B, r in sweep.items() if r["intensity"] < v5e.ridge)
compute_side = min(B for B, r in sweep.items() if r["intensity"] > v5e.ridge)
below = [r["roof"] / r["xla"] for r in sweep.values() if r["intensity"] < v5e.ridge]
above = [r["roof"] / r["xla"] for r in sweep.values() if r["intensity"] > v5e.ridge]
print(f"XLA's counts cross the ridge between batch {memory_side} and {compute_side} (predicted "
      f"{crossing_pred:.0f}). XLA's estimate is the roofline with {min(below):.2%}–{max(below):.2%} "
      f"of the datasheet HBM bandwidth below the ridge and {min(above):.2%}–{max(above):.2%} of "
      f"the MXU peak above it")

# %% md
# XLA's time estimate has the roofline's shape — its bytes over a bandwidth below the ridge,
# its FLOPs over a peak above it — with a fixed fraction of each datasheet figure: its cost
# model assumes the datasheet peaks are not quite reached (a calibration of the model; XLA
# does not publish its figures). This compares two models; a TPU could measure otherwise.

# %% code
assert max(below) / min(below) < 1.001 and max(above) / min(above) < 1.001  # claim: xla-estimate-is-a-roofline
assert 0.8 < min(below + above) and max(below + above) < 1

# %% code
assert memory_side < crossing_pred < compute_side  # claim: ridge-crossing

# %% md
# ## GPU targets
# With the CUDA plugin (`pip install "jax[cuda12]"`, a large download) nbcompile compiles for a
# GPU deviceless, from a description of the chip. Compare two generations: on an H100 XLA writes
# its own matmul kernels (Triton GEMM fusions); on a V100 it calls NVIDIA's cuBLAS library.
# Without the plugin it lowers to StableHLO for CUDA and says what is missing.

# %% code
h100 = nbcompile.compile(mlp, params, x, backend="gpu", gpu="h100")
print(h100.backend, "| optimised HLO:", "yes" if h100.hlo else "no")
for note in h100.notes:
    print("note:", note)
assert h100.backend == "cuda" and h100.stablehlo
if h100.hlo:  # the plugin is installed: compare two GPU generations, measured here
    v100 = nbcompile.compile(mlp, params, x, backend="gpu", gpu="v100")
    # XLA's own Triton kernels and cuBLAS library calls, by name
    kinds = {name: collections.Counter(re.findall(r'"kind":"(__triton[\w]*)"', c.hlo)
                                       + re.findall(r'custom_call_target="(__cublas[^"]*)"', c.hlo))
             for name, c in (("H100", h100), ("V100", v100))}
    for name, k in kinds.items():
        print(f"{name}: {dict(k)}")
    assert any("triton" in k for k in kinds["H100"]) and any("cublas" in k for k in kinds["V100"])
else:  # documented, not measured here (nbcompile's test suite checks it with the plugin)
    print("documented (with the plugin): H100 → Triton GEMM fusions; V100 → cuBLAS calls")
    assert any("pip install" in n for n in h100.notes)

# %% md
# ## A mesh of 8 devices
# Shard the batch over a `data` axis and the weights over a `model` axis: XLA partitions the
# program per device and inserts the collectives (all-reduce, all-gather) it needs.

# %% code
%%compile -q --mesh 4x2:data,model --shard x=data,None params.w1=None,model params.w2=model,None
def mlp(params, x):
    h = jax.nn.gelu(x @ params["w1"])
    return jax.nn.softmax(h @ params["w2"], axis=-1)
mlp(params, x)

# %% md
# **Predict first.** `x` is split over `data` (four ways: a quarter of its rows per device)
# and `w1`'s columns over `model`, so each device holds `h` for its rows and half the hidden
# units. `h @ w2` contracts over the hidden units, which `w2`'s rows split over `model` too:
# each device computes a *partial sum* of its rows' float32 output (its rows by `w2`'s
# columns), and the two devices of a `model` pair must add theirs. How many bytes does that
# all-reduce move per device?

# %% code
sharded = nbcompile.last()
print(sharded.extras["target"]["text"])
ops = {c["op"] for c in sharded.extras["target"]["collectives"]}
assert ops & {"all-reduce", "all-gather", "reduce-scatter"}, ops

# %% code hide
rows, out_cols = x.shape[0] // 4, params["w2"].shape[1]
allreduce_pred = rows * out_cols * 4     # 32 × 512 float32 partial sums
# the raw JAX: place the arguments on the same mesh by hand, jit, lower, compile; the
# per-device program's text names each all-reduce with its shape
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("data", "model"))
placed = ({"w1": jax.device_put(params["w1"], NamedSharding(mesh, P(None, "model"))),
           "w2": jax.device_put(params["w2"], NamedSharding(mesh, P("model", None)))},
          jax.device_put(x, NamedSharding(mesh, P("data", None))))
by_hand = jax.jit(sharded.original).lower(*placed).compile().as_text()
shapes = re.findall(r"= (f32\[[\d,]+\])\S* all-reduce\(", by_hand)
assert shapes == re.findall(r"= (f32\[[\d,]+\])\S* all-reduce\(", sharded.compiled.as_text())
print(f"answer: {rows} × {out_cols} × 4 = {allreduce_pred:,} bytes; the all-reduce of the program "
      f"compiled by hand (jax.jit(mlp).lower(...).compile().as_text()): {shapes}")
assert shapes == [f"f32[{rows},{out_cols}]"]

# %% code
reduces = [k["bytes"] for k in sharded.extras["target"]["collectives"] if k["op"] == "all-reduce"]
print(f"all-reduce bytes per device (nbcompile, from the HLO): {reduces}")
assert reduces == [allreduce_pred]  # claim: allreduce-bytes

# %% md
# ## What you saw
# - One model, different programs: the TPU program stores an activation in bfloat16, tiles its
#   arrays for the vector units, prefetches a weight asynchronously and runs matmuls as
#   convolutions; the CPU program does none of these.
# - XLA's TPU cost model puts this model below the chip's ridge: memory-bound. Sweeping a bf16
#   layer's batch, XLA's byte counts followed a formula read off its per-operand figures, and
#   its intensity crossed the ridge where that formula predicts. XLA's time estimate is a
#   roofline too — a constant factor above the datasheet one on both sides of the ridge: a
#   comparison of two models, not a measurement.
# - GPU generations differ too (XLA's own Triton kernels vs cuBLAS), compiled deviceless with
#   the CUDA plugin.
# - On a mesh, XLA inserted the collectives that tie the devices together: an all-reduce of
#   the partial sums, its bytes predicted from the shapes and the sharding.
