# %% md
# # 05 · Compilation is hardware-specific: CPU, TPU, GPU and device meshes
#
# **You will learn** that the same model compiles to different programs for different hardware,
# and how to see them side by side on any machine: nbcompile compiles for a TPU *without a TPU*
# (deviceless, through libtpu), lowers for a GPU, and compiles for a mesh of 8 devices.

# %% code
import os
# 8 virtual CPU devices for the mesh section; must be set before JAX starts.
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
%load_ext nbcompile
import jax, jax.numpy as jnp, numpy as np
import nbcompile

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
table = nbcompile.compare(cpu, tpu)
print(table.text())
print("TPU layouts, e.g.:", [ln.strip()[:90] for ln in tpu.hlo.splitlines() if "T(8,128)" in ln][:1])
print("XLA's estimated TPU time:", tpu.cost["optimal_seconds"], "s")

# %% code
assert tpu.backend == "tpu" and "T(8,128)" in tpu.hlo
assert tpu.cost["optimal_seconds"] > 0
assert cpu.hlo != tpu.hlo
assert any(f.source_lines for f in tpu.fusions)

# %% md
# ## A GPU target
# With the CUDA plugin (`pip install "jax[cuda12]"`, 5.5 GB) nbcompile compiles for an H100
# deviceless; without it, it lowers to StableHLO for CUDA and says exactly what is missing.

# %% code
gpu = nbcompile.compile(mlp, params, x, backend="gpu", gpu="h100")
print(gpu.backend, "| optimised HLO:", "yes" if gpu.hlo else "no")
for note in gpu.notes:
    print("note:", note)
assert gpu.backend == "cuda" and gpu.stablehlo
assert gpu.hlo is not None or any("pip install" in n for n in gpu.notes)

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
# - One model, different programs: the CPU and the TPU compiles differ in kernels, layouts and
#   fusion decisions; XLA's TPU cost model estimated its run time without a TPU.
# - A GPU compile needs the CUDA plugin; without it nbcompile lowers and says what to install.
# - On a mesh, XLA inserted the collectives that tie the devices together.
