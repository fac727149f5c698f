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
assert bf16 and "bf16" not in cpu.hlo                     # number format
assert tiled > len(arrays) / 2 and "T(8,128)" not in cpu.hlo   # layout
assert ops_tpu["copy-start"] >= 1 and ops_tpu["copy-done"] >= 1 and not ops_cpu["copy-start"]
assert ops_tpu["convolution"] >= 2 and ops_cpu["convolution"] == 0
assert any(f.source_lines for f in tpu.fusions)

# %% md
# ## The roofline, on XLA's own TPU numbers
# XLA's TPU cost model says how many FLOPs the program does and how many bytes it moves. Their
# ratio, the arithmetic intensity, against the chip's ridge (peak FLOP/s ÷ HBM bytes/s, from
# the v5e datasheet) says what limits it — and bytes ÷ bandwidth predicts XLA's time estimate.

# %% code
v5e = spec_peaks("tpu", "v5e")
intensity = tpu.cost["flops"] / tpu.cost["bytes_accessed"]
memory_time = tpu.cost["bytes_accessed"] / v5e.bytes_per_s.value
compute_time = tpu.cost["flops"] / v5e.flops_per_s.value
print(f"{tpu.cost['flops'] / 1e6:.0f} MFLOP, {tpu.cost['bytes_accessed'] / 1e6:.1f} MB (XLA): "
      f"{intensity:.1f} FLOP/byte; v5e ridge {v5e.ridge:.0f} FLOP/byte ({v5e.bytes_per_s.source}: "
      f"{v5e.bytes_per_s.detail}) → memory-bound")
print(f"bytes / HBM bandwidth = {memory_time * 1e6:.1f} µs, FLOPs / peak = "
      f"{compute_time * 1e6:.1f} µs; XLA's estimate: {tpu.cost['optimal_seconds'] * 1e6:.1f} µs")
assert intensity < v5e.ridge and memory_time > compute_time
assert abs(memory_time - tpu.cost["optimal_seconds"]) < 0.3 * tpu.cost["optimal_seconds"]

# %% md
# **Crossing the ridge.** A small batch cannot keep a TPU's matrix unit busy: every weight
# byte read is used by only `B` rows. Sweep the batch of one `B×D @ D×D` layer in bf16 (2
# bytes a value), as the scaling book does: its intensity is `2·B·D² / (2·(2·B·D + D²))
# = B·D / (2·B + D)` FLOP/byte, about `B` while `B ≪ D`, so it should cross the ridge near
# `B = ridge·D / (D − 2·ridge)`. Predict that batch first, then read XLA's counts for each
# batch (shapes only, nothing allocated) and check the roofline's prediction of XLA's time
# estimate — the larger of bytes ÷ bandwidth and FLOPs ÷ peak — on both sides of the ridge.

# %% code
D = 8192
w_spec = jax.ShapeDtypeStruct((D, D), jnp.bfloat16)
crossing_pred = v5e.ridge * D / (D - 2 * v5e.ridge)
print(f"predicted: intensity reaches the ridge ({v5e.ridge:.0f} FLOP/byte) at batch {crossing_pred:.0f}")
sweep = {}
for B in (64, 128, 256, 384, 512, 1024):
    cost = nbcompile.compile(lambda w, a: a @ w, w_spec, jax.ShapeDtypeStruct((B, D), jnp.bfloat16),
                             backend="tpu", topology="v5e:2x2").cost
    roof = max(cost["bytes_accessed"] / v5e.bytes_per_s.value, cost["flops"] / v5e.flops_per_s.value)
    sweep[B] = (cost["flops"] / cost["bytes_accessed"], roof, cost["optimal_seconds"])
    i, r, o = sweep[B]
    print(f"batch {B:>5}: {i:6.1f} FLOP/byte (hand count {B * D / (2 * B + D):6.1f}) "
          f"{'compute' if i > v5e.ridge else 'memory':>7}-bound; roofline {r * 1e6:7.1f} µs, "
          f"XLA's estimate {o * 1e6:7.1f} µs")
crossing = min(B for B, (i, _, _) in sweep.items() if i > v5e.ridge)
print(f"XLA's counts cross the ridge at batch {crossing} (predicted {crossing_pred:.0f}; XLA counts "
      f"more bytes than the hand count as the batch grows)")

# %% code
assert all(abs(o / r - 1) < 0.2 for _, r, o in sweep.values())   # the roofline predicts XLA's time
assert crossing_pred / 2 < crossing < 2 * crossing_pred            # and where the ridge is crossed
assert sweep[64][0] < v5e.ridge < sweep[1024][0]

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

# %% code
sharded = nbcompile.last()
print(sharded.extras["target"]["text"])
ops = {c["op"] for c in sharded.extras["target"]["collectives"]}
assert ops & {"all-reduce", "all-gather", "reduce-scatter"}, ops

# %% md
# ## What you saw
# - One model, different programs: the TPU program stores an activation in bfloat16, tiles its
#   arrays for the vector units, prefetches a weight asynchronously and runs matmuls as
#   convolutions; the CPU program does none of these.
# - XLA's TPU cost model puts this model below the chip's ridge: memory-bound, and its time
#   estimate is close to bytes ÷ HBM bandwidth. Sweeping a bf16 layer's batch, the intensity
#   crossed the ridge near the predicted batch, and the roofline — the larger of the memory and
#   the compute time — predicted XLA's estimate on both sides.
# - GPU generations differ too (XLA's own Triton kernels vs cuBLAS), compiled deviceless with
#   the CUDA plugin.
# - On a mesh, XLA inserted the collectives that tie the devices together.
