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
# A stack of three residual blocks (matmul, layer norm, GELU) and a squared-error loss. The
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

width, depth = 2048, 3
net = Net(width, depth, nnx.Rngs(0))
batch = 196608   # twice as many examples will not fit a v5e chip as written (predicted below)
x = jax.ShapeDtypeStruct((batch, width), jnp.float32)

# %% md
# ## Predict the peak from the shapes
# Before compiling, count what a training step must hold at its peak, the start of the
# backward pass. One unit is a `batch × width` float32 array. The input `x` is one unit.
# Reverse-mode autodiff keeps, for each block, what its backward step reads: the block's input
# (for the weight's gradient `hᵀ · dz`; block k's input is block k-1's output) and its matrix
# product `z` (for layer norm's and gelu's derivatives, which XLA recomputes from `z` inside
# its fused backward kernels). The last block's output is used at once by the loss, so it is
# not kept: `2·depth − 1` residual units. The backward's first gradient is one more unit, and
# the weights are small beside all that.

# %% code
unit = batch * width * 4                                     # bytes of one batch × width array
weights = depth * (width * width + 2 * width) * 4            # proj kernel, norm scale and bias
residual_pred = (2 * depth - 1) * unit
peak_pred = weights + unit + residual_pred + unit            # x + residuals + one gradient
print(f"predicted: {residual_pred / GiB:.2f} GiB of residuals ({2 * depth - 1} units of "
      f"{unit / GiB:.3f} GiB), peak {peak_pred / GiB:.2f} GiB of which {residual_pred / peak_pred:.0%} "
      f"residuals; the weights {weights / GiB:.3f} GiB")

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
# the raw JAX figures behind the map: XLA's buffer sizes of the compiled gradient program
stats = c.grad.compiled.memory_analysis()
total = stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes
print(f"c.grad.compiled.memory_analysis(): arguments {stats.argument_size_in_bytes / GiB:.2f} GiB "
      f"+ outputs {stats.output_size_in_bytes / GiB:.2f} + temporaries "
      f"{stats.temp_size_in_bytes / GiB:.2f} = {total / GiB:.2f} GiB; the map's peak, along "
      f"XLA's schedule: {m.peak_bytes / GiB:.2f} GiB")

# %% md
# Most of the peak is **residuals**, as predicted. Which lines made them? The map keys every
# buffer by the source location it came from (the line inside `Block.__call__`, in the cell that
# defined it).

# %% code
for loc, nbytes in list(m.by_line.items())[:4]:
    print(f"{nbytes / GiB:6.2f} GiB  {loc.label}  {loc.detail or ''}")
residual_share = kinds["residual"] / m.peak_bytes
print(f"residuals: {residual_share:.0%} of the {m.peak_bytes / GiB:.2f} GiB peak "
      f"(predicted {residual_pred / peak_pred:.0%}); XLA {kinds['residual'] / GiB:.2f} GiB vs "
      f"predicted {residual_pred / GiB:.2f} GiB; peak {m.peak_bytes / peak_pred:.3f}× the "
      f"prediction; fits a v5e chip ({m.capacity_bytes / GiB:.0f} GiB): {m.fits}")

# %% code
assert m.program == "value_and_grad" and m.platform == "tpu"
assert abs(kinds["residual"] / residual_pred - 1) < 0.01  # claim: residuals-predicted
assert abs(m.peak_bytes / peak_pred - 1) < 0.02 and m.peak_bytes <= total <= 1.02 * m.peak_bytes
assert kinds["residual"] > kinds["parameter"] + kinds["output"] + kinds["temporary"]
assert m.fits is True and m.capacity_bytes == 16 * GiB and m.capacity_source == "spec"
assert sum(b.bytes for b in m.at_peak) == m.peak_bytes == max(b for _, b in m.timeline)
top = next(iter(m.by_line))
assert top.is_cell and "Block" not in top.label  # a cell line, shown as In [n] line k

# %% md
# ## Twice the batch: does it still fit?
# **Predict first.** Everything but the weights grows with the batch: the input, the
# residuals, the gradients. Write down the peak at twice the batch from the prediction above,
# and whether it fits the chip's HBM. (The answer is checked in the hidden cell below.)

# %% code hide
big_pred = weights + 2 * (peak_pred - weights)   # every batch-sized unit doubles
print(f"answer: at batch {2 * batch} the step needs {big_pred / GiB:.1f} GiB (the weights once, "
      f"every batch-sized unit twice): it does not fit {m.capacity_bytes / GiB:.0f} GiB")
assert big_pred > m.capacity_bytes > m.peak_bytes

# %% md
# The fix to try is **rematerialisation**: keep only each block's input for the backward pass
# and recompute the block's forward during its own backward step. In Flax NNX that is one
# change to the block — `nnx.remat` around its call:

# %% code
class RematBlock(Block):
    def __call__(self, h):
        return nnx.remat(lambda block, h: Block.__call__(block, h))(self, h)

# %% md
# Predict remat's peak too, as bounds. At twice the batch a unit is twice as large; the step
# must keep `x` and the other blocks' inputs (`depth` units in all: the least it can hold), and
# while one block's backward step runs it holds at most that block's recomputed matrix product
# and the gradient flowing in besides: `depth + 2` units.
# Then `memory_options` compiles the step at that batch as written and with exactly this change
# applied to every `Block` (`nnx.remat(Block.__call__)`, without editing your class). Every
# figure is XLA's; XLA:TPU refuses the first program for lack of HBM, and says how much it
# would need.

# %% code
big_batch = 2 * batch
remat_least = weights + depth * 2 * unit
remat_pred = weights + (depth + 2) * 2 * unit
bigger = memory_options(c, batch_size=big_batch, policies=(), donate=False, search_batch=False)
print(f"batch {batch} → {big_batch}:")
print(bigger.text())
plain, remat = bigger.baseline, bigger.options[0]
print(f"as written: predicted {big_pred / GiB:.1f} GiB, XLA {plain.required_bytes / GiB:.1f} GiB; "
      f"with remat: predicted {remat_least / GiB:.1f}–{remat_pred / GiB:.1f} GiB, XLA "
      f"{remat.peak_bytes / GiB:.1f} GiB")
assert remat.name.startswith("remat per layer") and "Block" in remat.name
assert plain.fits is False and remat.fits is True  # claim: remat-fits
assert remat_least <= remat.peak_bytes <= 1.01 * remat_pred

# %% md
# XLA needs less than the straight-line prediction for the program as written: once a program
# is over capacity, XLA:TPU rematerialises some values on its own (at the batch above, which
# fits, it did not: its map matched the prediction). Here that was not enough, and `nnx.remat`
# was.
#
# ## What remat costs, predicted and counted
# Predict from the shapes first. The forward pass is `depth` matrix products of `2·B·W²` flops
# (the element-wise work is small beside them). The backward pass has two products per block,
# the weight's gradient and the input's — except the first block, whose input `x` is not
# differentiated: `2·depth − 1`. So a training step is `3·depth − 1` products, and remat, which
# runs every block's forward once more, `4·depth − 1`. Then read XLA's counts: the step at the
# first batch, and remat's variant at twice the batch (flops grow exactly with the batch).

# %% code
product = 2 * batch * width**2                               # flops of one B×W @ W×W
forward_pred, step_pred = depth * product, (3 * depth - 1) * product
remat_pred_flops = (4 * depth - 1) * product * big_batch / batch     # remat was compiled at big_batch
forward_flops = c.summary()["flops"]
step_flops, remat_flops = c.grad.summary()["flops"], remat.flops
raw_flops = c.grad.compiled.cost_analysis()
raw_flops = (raw_flops[0] if isinstance(raw_flops, list) else raw_flops)["flops"]
print(f"forward:          predicted {forward_pred:.3g} flops, XLA {forward_flops:.3g}")
print(f"training step:    predicted {step_pred:.3g} ({3 * depth - 1} products), XLA {step_flops:.3g} "
      f"(×{step_flops / step_pred:.3f}; cost_analysis() of c.grad.compiled: {raw_flops:.3g})")
print(f"with remat, at {big_batch}: predicted {remat_pred_flops:.3g} ({4 * depth - 1} products), XLA "
      f"{remat_flops:.3g} (×{remat_flops / remat_pred_flops:.3f})")
extra = remat_flops / (step_flops * big_batch / batch) - 1
print(f"remat per layer at twice the batch: peak {remat.peak_bytes / GiB:.1f} GiB instead of "
      f"{big_pred / GiB:.1f} GiB (predicted as written), for {extra:.1%} more flops (predicted "
      f"{(4 * depth - 1) / (3 * depth - 1) - 1:.1%}; XLA's counts, not timings: there is no TPU here)")

# %% md
# XLA's counts are a little above the products alone: they include the element-wise work
# (layer norm, gelu, the residual adds), some of it recomputed inside the backward's fused
# kernels rather than kept (the residuals above were only the block inputs and the matrix
# products).

# %% code
assert 1 <= remat_flops / remat_pred_flops < 1.02  # claim: remat-costs-a-forward
assert 1 <= forward_flops / forward_pred < 1.02 and 1 <= step_flops / step_pred < 1.02
assert step_flops == raw_flops

# %% md
# ## What you saw
# - The peak of a training step was predicted from the shapes — the input, two residual arrays
#   per block (its input and its matrix product), one gradient — and XLA's memory map, along its
#   own schedule, matched it: mostly residuals, on the lines of the forward ops that made them.
# - The fit verdict compares XLA's allocation with the chip's published HBM capacity (cited in
#   `m.capacity_label`) — planned deviceless, nothing allocated.
# - Twice the batch was predicted not to fit, and did not; rematerialising each block
#   (`nnx.remat`, one line in the block) kept the block inputs only, and fitted, within the
#   bounds predicted.
#   Its price, predicted from the shapes as one more forward pass, matched XLA's flop count (a
#   count from the compiled program, not a timing), within the element-wise work.
