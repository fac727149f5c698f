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
    def __init__(self, width, depth, rngs, block=Block):
        self.blocks = nnx.List([block(width, rngs) for _ in range(depth)])

    def __call__(self, x):
        for block in self.blocks:
            x = block(x)
        return jnp.mean(x ** 2)

width, depth = 2048, 6
net = Net(width, depth, nnx.Rngs(0))
batch = 163840   # chosen so the step fits a v5e chip as written, and half as much again does not
x = jax.ShapeDtypeStruct((batch, width), jnp.float32)

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
# The peak grows with the batch (residuals and temporaries are batch-sized, the parameters are
# not). Half as many examples again is predicted from the peak above not to fit; the fix to try
# is **rematerialisation**: keep only each block's input for the backward pass and recompute the
# block's forward during its own backward step. In Flax NNX that is one change to the block —
# `nnx.remat` around its call:

# %% code
class RematBlock(Block):
    def __call__(self, h):
        return nnx.remat(lambda block, h: Block.__call__(block, h))(self, h)

per_example = (m.peak_bytes - kinds["parameter"]) / batch
print(f"predicted peak at batch {batch * 3 // 2}: {(kinds['parameter'] + per_example * batch * 3 // 2) / GiB:.1f} GiB "
      f"(parameters + {per_example / 2**20:.2f} MiB per example × batch) vs {m.capacity_bytes / GiB:.0f} GiB")

# %% md
# `memory_options` compiles the step at that batch as written and with exactly this change
# applied to every `Block` (`nnx.remat(Block.__call__)`, without editing your class). Every
# figure is XLA's; XLA:TPU even refuses the first program for lack of HBM, and the map still
# shows why.

# %% code
bigger = memory_options(c, batch_size=batch * 3 // 2, policies=(), donate=False, search_batch=False)
print(f"batch {batch} → {batch * 3 // 2}:")
print(bigger.text())
plain, remat = bigger.baseline, bigger.options[0]
assert plain.fits is False and remat.fits is True
assert remat.required_bytes < 16 * GiB < plain.required_bytes
assert remat.name.startswith("remat per layer") and "Block" in remat.name

# %% md
# ## What remat costs, predicted and counted
# Predict from the shapes first. The forward pass is `depth` matrix products of `2·B·W²` flops
# (the element-wise work is small beside them); the backward pass has two products per block
# (the weight's gradient and the input's). So a training step is about three forward passes,
# and remat adds one more, while the residuals shrink to one `B×W` input per block. Then
# compile the `RematBlock` model at the same batch and read XLA's count:

# %% code
forward_pred = depth * 2 * batch * width**2
remat_c = nbcompile.compile(Net(width, depth, nnx.Rngs(0), block=RematBlock), x, grad=True,
                            backend="tpu", topology="v5e:2x2")
forward_flops = c.summary()["flops"]
step_flops, remat_flops = c.grad.summary()["flops"], remat_c.grad.summary()["flops"]
residual_pred = depth * 1 * batch * width * 4
print(f"forward:          predicted {forward_pred:.3g} flops, XLA {forward_flops:.3g}")
print(f"training step:    predicted {3 * forward_pred:.3g} (3 forward), XLA {step_flops:.3g} "
      f"({step_flops / forward_pred:.2f} forward)")
print(f"with remat:       predicted {4 * forward_pred:.3g} (4 forward), XLA {remat_flops:.3g} "
      f"({remat_flops / forward_pred:.2f} forward)")
print(f"remat's residuals: predicted {residual_pred / GiB:.2f} GiB (depth × B × W × 4 bytes), "
      f"traced {remat_c.gradient.residual_bytes / GiB:.2f} GiB; as written "
      f"{c.gradient.residual_bytes / GiB:.2f} GiB")
saved = 1 - remat_c.memory_map.peak_bytes / m.peak_bytes
print(f"remat per layer: {saved:.0%} lower peak for {remat_flops / step_flops - 1:.0%} more flops "
      f"(XLA's counts, not timings: there is no TPU here)")

# %% md
# As written, autodiff marks every intermediate of every block as saved for the backward pass
# (the traced figure); XLA's map above holds far fewer at the peak — mostly the block outputs
# (`add`) and the matrix products (`dot_general`): the element-wise values in between are
# recomputed inside the backward's fusions (which is also why the step counts a little more
# than three forward passes, and remat adds a little less than one). With remat, only each
# block's input is saved.

# %% code
assert abs(forward_flops / forward_pred - 1) < 0.1 and abs(step_flops / (3 * forward_pred) - 1) < 0.1
assert abs(remat_flops / (4 * forward_pred) - 1) < 0.1                 # remat: one forward more
assert abs(remat_c.gradient.residual_bytes / residual_pred - 1) < 0.2 and saved > 0.15

# %% md
# ## What you saw
# - The memory map follows XLA's schedule of the compiled gradient program: the peak is
#   mostly residuals, on the lines of the forward ops that made them.
# - The fit verdict compares XLA's allocation with the chip's published HBM capacity (cited in
#   `m.capacity_label`) — planned deviceless, nothing allocated.
# - Rematerialising each block (`nnx.remat`, one line in the block) turned a batch that does
#   not fit into one that does; its price, predicted from the shapes as one more forward pass,
#   matched XLA's flop count (a count from the compiled program, not a timing).
