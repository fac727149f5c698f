# %% md
# # 06 · Freezing: one file with the architecture and the trained weights
#
# **You will learn** what a *frozen* model is: the compiled program and its trained weights in
# one file that serves predictions in a fresh process — without your source code, your
# training data or this notebook — giving the same output for the same input. And that freezing
# writes exactly what was traced: dropout's random numbers and batch norm's batch statistics
# are gone only if the model was in eval mode when you froze it.

# %% code
%load_ext nbcompile
import collections, os, re, subprocess, sys, tempfile
import jax, jax.numpy as jnp, numpy as np
from flax import nnx
import nbcompile

out = tempfile.mkdtemp()  # every file this notebook writes goes here
rng = np.random.default_rng(0)
X = jnp.asarray(rng.normal(size=(256, 8)), jnp.float32)
Y = jnp.asarray(np.sin(np.asarray(X).sum(axis=1, keepdims=True)), jnp.float32)
params = {"w1": jnp.asarray(rng.normal(size=(8, 32)) / 3, jnp.float32),
          "w2": jnp.asarray(rng.normal(size=(32, 1)) / 6, jnp.float32)}

# %% md
# ## Train a small model (so the weights are really *trained*)

# %% code
%%compile --grad -q
def loss(params, x, y):
    pred = jnp.tanh(x @ params["w1"]) @ params["w2"]
    return jnp.mean((pred - y) ** 2)
loss(params, X, Y)

# %% code
step = loss.compilation.grad.fn          # compiled value_and_grad
first = float(loss(params, X, Y))
for _ in range(200):
    value, grads = step(params, X, Y)
    params = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)
print(f"loss {first:.4f} → {float(value):.4f}")
assert float(value) < first

# %% md
# ## Freeze the inference function
# `--freeze` writes the program (a `jax.export` artifact, lowered for CPU, CUDA and TPU) and the
# weights (a safetensors-layout section) into one file, with versions, signature and checksums.

# %% code
path = os.path.join(out, "model.nbc")

# %% code
%%compile --freeze {path}
def predict(params, x):
    return jnp.tanh(x @ params["w1"]) @ params["w2"]
predict(params, X)

# %% code
fr = predict.compilation.extras["freeze"]
print(fr["text"])
raw = sum(np.asarray(v).nbytes for v in jax.tree_util.tree_leaves(params))
print(f"files written: {os.listdir(out)}; {fr['file_bytes']} B holding {raw} B of weights "
      f"and the program; platforms {fr['platforms']}")

# %% code
assert os.listdir(out) == ["model.nbc"] and fr["weight_bytes"] == raw  # claim: one-file

# %% md
# ## Serve it in a fresh process, without the source
# A new Python process that never saw `predict` loads the file and predicts — on a batch of 5,
# though it was frozen with 256 examples: the batch dimension is exported as a symbolic `b`.
# The loader checks size, magic, version, checksums and weight layout *before* deserialising
# anything, and never runs code from the file.

# %% code
x_new = np.asarray(rng.normal(size=(5, 8)), np.float32)  # any batch size: frozen with a symbolic `b`
np.save(os.path.join(out, "x.npy"), x_new)
served = subprocess.run([sys.executable, "-m", "nbcompile.cli", "run", path, "--input",
                         os.path.join(out, "x.npy"), "--output", os.path.join(out, "y.npy")],
                        capture_output=True, text=True, cwd=out)
print(served.stdout or served.stderr)
y_served = np.load(os.path.join(out, "y.npy"))
here = np.asarray(predict(params, x_new))
print("fresh process:", y_served[:2].ravel(), "| notebook:", here[:2].ravel())
assert served.returncode == 0
assert np.array_equal(y_served, here)  # claim: served-bit-identical

# %% code
model = nbcompile.load(path)
print(model.signature["inputs"]["leaves"], "→", model.signature["outputs"]["leaves"])
print("program:", model.metadata["program"]["stablehlo_ops"], "StableHLO ops; weights:",
      {name: shape for name, shape in model.weights.items()})
assert np.array_equal(np.asarray(model(x_new)), here)

# %% md
# ## Freezing writes what was traced: switch to eval mode first
# A model with **dropout** and **batch norm** computes differently in training: dropout draws
# random numbers to zero activations, and batch norm normalises with the statistics of the
# current batch (updating its running averages as a side effect). For inference both must be
# fixed — no random numbers, the stored running averages — and that is what `net.eval()`
# does, *not* freezing: `freeze` writes the program it traced, whatever mode the model was in.
# Freeze the same model twice, in training mode and in eval mode, and count the random-bit ops
# (`xor`, shifts: the threefry generator) and the reductions in each file's program. Freezing
# a model in training mode is allowed (it may be what you want), so `freeze` only adds a note
# naming the layers still in training mode — read it.

# %% code
class Net(nnx.Module):
    def __init__(self, rngs):
        self.l1 = nnx.Linear(8, 32, rngs=rngs)
        self.bn = nnx.BatchNorm(32, rngs=rngs)
        self.drop = nnx.Dropout(0.5, rngs=rngs)
        self.l2 = nnx.Linear(32, 1, rngs=rngs)

    def __call__(self, x):
        return self.l2(self.drop(jax.nn.relu(self.bn(self.l1(x)))))

net = Net(nnx.Rngs(0))
BITS = ("xor", "shift_left", "shift_right_logical", "rng_bit_generator")

def file_census(m):
    """Random-bit ops and reductions in a frozen file's program (its StableHLO text)."""
    ops = collections.Counter(re.findall(r"stablehlo\.([a-z_]+)", m.exported.mlir_module()))
    return sum(ops[k] for k in BITS), ops["reduce"]

notes = {}

def freeze_and_load(c, name):
    notes[name] = c.freeze(os.path.join(out, name)).notes
    return nbcompile.load(os.path.join(out, name))

net.train()
mean_before = np.asarray(net.bn.mean[...]).copy()
a, b = np.asarray(net(X)), np.asarray(net(X))  # two training-mode calls, run eagerly
moved = float(np.abs(np.asarray(net.bn.mean[...]) - mean_before).max())
frozen_train = freeze_and_load(nbcompile.compile(net, X), "net_train.nbc")

net.eval()                                        # the step that removes the training work
frozen = freeze_and_load(nbcompile.compile(net, X), "net.nbc")
for name, note in notes.items():
    print(f"freeze's note on {name}: {note[0] if note else 'none'}")

for name, m in (("training mode", frozen_train), ("eval mode", frozen)):
    bits, reduces = file_census(m)
    print(f"frozen in {name:<13}: {bits:>3} random-bit ops, {reduces} reductions, "
          f"{m.metadata['program']['stablehlo_ops']} StableHLO ops")
print(f"training mode, eager, same input twice: outputs differ by up to {np.abs(a - b).max():.3f};"
      f" the running mean moved by {moved:.4f}")

# %% code
assert file_census(frozen)[0] == 0 and file_census(frozen)[1] == 0  # claim: eval-strips-training-ops
assert file_census(frozen_train)[0] > 0 and file_census(frozen_train)[1] >= 2  # the control: frozen in training mode, they are there
assert np.abs(a - b).max() > 0 and moved > 0
assert "drop (Dropout)" in notes["net_train.nbc"][0] and notes["net.nbc"] == ()

# %% md
# The file frozen in training mode is not even a usable training model: its dropout key is a
# stored weight, so it drops the *same* units on every call, and each example's output depends
# on the rest of its batch (batch statistics). The eval-mode file gives the same output every
# call, equal to the eval-mode model, and an example's output does not depend on its batch:

# %% code
t1, t2 = np.asarray(frozen_train(X)), np.asarray(frozen_train(X))
c1, c2 = np.asarray(frozen(X)), np.asarray(frozen(X))
here_eval = np.asarray(net(X))
print(f"training-mode file: same input twice differs by {np.abs(t1 - t2).max()}; vs the "
      f"eval-mode model {np.abs(t1 - here_eval).max():.3f}; first 5 rows alone vs in the batch "
      f"{np.abs(np.asarray(frozen_train(X[:5])) - t1[:5]).max():.3f}")
print(f"eval-mode file:     same input twice differs by {np.abs(c1 - c2).max()}; vs the "
      f"eval-mode model {np.abs(c1 - here_eval).max():.1e}; first 5 rows alone vs in the batch "
      f"{np.abs(np.asarray(frozen(X[:5])) - c1[:5]).max():.1e}")
assert np.array_equal(c1, c2)
np.testing.assert_allclose(c1, here_eval, rtol=1e-5, atol=1e-6)
np.testing.assert_allclose(np.asarray(frozen(X[:5])), c1[:5], rtol=1e-5, atol=1e-6)
assert np.abs(t1 - here_eval).max() > 1e-3

# %% md
# ## Weights as constants: the TensorFlow-style freeze
# `constants=True` (`--freeze-constants`) bakes the weights into the program itself, so the
# file has no weight section — and XLA, compiling the program when the file is loaded, may
# compute any *weight-only* work once, at compile time (constant folding, tutorial 03). A
# low-rank layer shows it: its weight is stored as two factors `u` (shape `(8, 4)`) and `v`
# (shape `(4, 32)`), and
# the program multiplies them at every call — unless they are constants.

# %% code
params_lr = {"u": jnp.asarray(rng.normal(size=(8, 4)) / 3, jnp.float32),
             "v": jnp.asarray(rng.normal(size=(4, 32)) / 2, jnp.float32),
             "w2": params["w2"]}

def predict_lr(params, x):
    w1 = params["u"] @ params["v"]          # weight-only work: the factors' product
    return jnp.tanh(x @ w1) @ params["w2"]

const_path = os.path.join(out, "model_const.nbc")
nbcompile.freeze(predict_lr, params_lr, X, path=const_path, constants=True)
const = nbcompile.load(const_path)
print(f"constants file: {len(const.weights)} weight tensors, program "
      f"{const.metadata['program']['stablehlo_ops']} StableHLO ops, {os.path.getsize(const_path)} B")

# %% md
# **Predict first.** Loaded, the constants file's program is compiled by XLA for this machine.
# How many fewer flops per call will XLA count for it than for the same function with the
# weights as arguments? Write it from the shapes of `u` and `v`.

# %% code hide
folded_pred = 2 * 8 * 4 * 32                # u @ v: 2·m·k·n
def xla_flops(compiled):
    cost = compiled.cost_analysis()
    return (cost[0] if isinstance(cost, list) else cost)["flops"]
# raw JAX on both: jit, lower at these shapes, compile, XLA's cost analysis
as_args = jax.jit(predict_lr).lower(params_lr, x_new).compile()
as_const = jax.jit(const.exported.call).lower(x_new).compile()   # the file's own program
dots = lambda compiled: compiled.as_text().count(" dot(") + compiled.as_text().count("dot_general(")  # noqa: E731
print(f"answer: {folded_pred} flops (u @ v, 2·8·4·32): XLA counts {xla_flops(as_args):.0f} with the "
      f"weights as arguments, {xla_flops(as_const):.0f} for the constants file; matrix-product "
      f"kernels in its compiled program: {dots(as_args)} vs {dots(as_const)}")
assert folded_pred == xla_flops(as_args) - xla_flops(as_const) and dots(as_args) == dots(as_const) + 1

# %% code
assert xla_flops(as_args) - xla_flops(as_const) == folded_pred  # claim: constants-fold
assert const.weights == {} and const.metadata["constants_mode"]
np.testing.assert_allclose(np.asarray(const(x_new)), np.asarray(predict_lr(params_lr, x_new)), rtol=1e-5, atol=1e-6)

# %% md
# ## What you saw
# - One file held the architecture and the trained weights; a fresh process served
#   predictions from it without the source, bit-identical to the notebook.
# - Freezing writes what was traced. Frozen in training mode, a model with dropout and batch
#   norm kept its random-bit ops and batch reductions (and dropped the same units every call),
#   and `freeze` said so in a note naming those layers; `net.eval()` before freezing removed
#   them: the same output every call, equal to the eval-mode model, whatever the batch.
# - Weights can be arguments (a weight section, swappable) or baked-in constants (no weight
#   section): then XLA computed the weight-only product once, at compile time — exactly its
#   flops left every call, counted by JAX's own `cost_analysis()` on the file's program.
# - A `.nbc` file from someone else is a program you have not seen: how the loader checks it
#   in child processes before it first runs (and why a file this machine froze is not checked
#   again) is in docs/format.md, "What `load` checks" and "Threat model".
