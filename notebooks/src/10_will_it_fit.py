# %% md
# # 10 · Will it fit? Where the bytes go, and what makes them fit
#
# **You will learn** to answer, on a laptop, the question an out-of-memory error asks too late:
# how much device memory a training step needs, which lines of your code hold it at the peak,
# whether it fits a TPU v5e chip, and what rematerialisation buys and costs — all from the
# program XLA compiles for a TPU that is not here (`--backend tpu`, through `libtpu`).

# %% code
%load_ext nbcompile
import jax, jax.numpy as jnp
from flax import nnx
import nbcompile
from nbcompile.measure.memory_options import memory_options
GiB = 2**30

# %% md
# A stack of six residual blocks (matmul, layer norm, GELU) and a squared-error loss. The
# batch is a `jax.ShapeDtypeStruct`: only its shape exists, nothing is allocated, so batches far
# larger than this machine could hold are planned here.

# %% code
class Block(nnx.Module):
    def __init__(self, width, rngs):
        self.proj = nnx.Linear(width, width, use_bias=False, rngs=rngs)
        self.norm = nnx.LayerNorm(width, rngs=rngs)

    def __call__(self, h):
        z = self.norm(self.proj(h))
        return h + jax.nn.gelu(z)

class Net(nnx.Module):
    def __init__(self, width, depth, rngs):
        self.blocks = nnx.List([Block(width, rngs) for _ in range(depth)])

    def __call__(self, x):
        for block in self.blocks:
            x = block(x)
        return jnp.mean(x ** 2)

net = Net(2048, 6, nnx.Rngs(0))
batch = 163840
x = jax.ShapeDtypeStruct((batch, 2048), jnp.float32)

# %% md
# ## The memory map of one training step
# `--grad --memory` compiles the loss *and its gradient* for a TPU v5e chip and maps the
# gradient program's memory along XLA's own schedule: the peak, what is live there, and why.

# %% code
%%compile --grad --memory --backend tpu --topology v5e:2x2
net(x)

# %% code
c = nbcompile.last()
m = c.memory_map
print(m.text(top=6))
kinds = m.by_kind
print({k: f"{v / GiB:.2f} GiB" for k, v in kinds.items() if v})

# %% md
# Most of the peak is **residuals**: forward values kept alive for the backward pass. Which
# lines made them? The map keys every buffer by the source location it came from (the line
# inside `Block.__call__`, in the cell that defined it).

# %% code
for loc, nbytes in list(m.by_line.items())[:4]:
    print(f"{nbytes / GiB:6.2f} GiB  {loc.label}  {loc.detail or ''}")
residual_share = kinds["residual"] / m.peak_bytes
print(f"residuals: {residual_share:.0%} of the {m.peak_bytes / GiB:.2f} GiB peak; "
      f"fits a v5e chip ({m.capacity_bytes / GiB:.0f} GiB): {m.fits}")

# %% code
assert m.program == "value_and_grad" and m.platform == "tpu"
assert kinds["residual"] > kinds["parameter"] + kinds["output"] + kinds["temporary"]
assert m.fits is True and m.capacity_bytes == 16 * GiB and m.capacity_source == "spec"
assert sum(b.bytes for b in m.at_peak) == m.peak_bytes == max(b for _, b in m.timeline)
top = next(iter(m.by_line))
assert top.is_cell and "Block" not in top.label  # a cell line, shown as In [n] line k

# %% md
# ## A bigger batch: does it still fit?
# `memory_options` compiles the same step again — here with half as many examples again — as
# written and with each `Block` rematerialised (`nnx.remat`: its forward recomputed during its own backward
# step). Every figure is XLA's; XLA:TPU even refuses the first one for lack of HBM, and the map
# still shows why.

# %% code
bigger = memory_options(c, batch_size=batch * 3 // 2, policies=(), donate=False, search_batch=False)
print(f"batch {batch} → {batch * 3 // 2}:")
print(bigger.text())
plain, remat = bigger.baseline, bigger.options[0]

# %% md
# Rematerialisation is paid for in flops. At the batch that fits either way, the cost is:

# %% code
same = memory_options(c, policies=(), donate=False, search_batch=False)
base_flops, remat_flops = same.baseline.flops, same.options[0].flops
extra = remat_flops / base_flops - 1
saved = 1 - same.options[0].required_bytes / same.baseline.required_bytes
print(f"remat per layer: {saved:.0%} less memory for {extra:.0%} more flops")

# %% code
assert plain.fits is False and remat.fits is True
assert remat.required_bytes < 16 * GiB < plain.required_bytes
assert remat.name.startswith("remat per layer") and "Block" in remat.name
assert 0.05 < extra < 0.5 and saved > 0.15

# %% md
# ## What you saw
# - The memory map follows XLA's schedule of the compiled gradient program: the peak is
#   mostly residuals, on the lines of the forward ops that made them.
# - The fit verdict compares XLA's allocation with the chip's published HBM capacity (cited in
#   `m.capacity_label`) — planned deviceless, nothing allocated.
# - Rematerialising each block turned a batch that does not fit into one that does, for a
#   measured price in flops.
