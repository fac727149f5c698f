# %% md
# # 06 · Freezing: one file with the architecture and the trained weights
#
# **You will learn** what a *frozen* model is: the compiled program and its trained weights in
# one file that serves predictions in a fresh process — without your source code, your
# training data or this notebook — giving the same output for the same input. And that freezing
# for inference strips the training-only work: dropout's random numbers and batch norm's
# batch statistics.

# %% code
%load_ext nbcompile
import collections, os, re, subprocess, sys, tempfile
import jax, jax.numpy as jnp, numpy as np
from flax import nnx
import nbcompile
from nbcompile.debug import equation_ids

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
assert os.listdir(out) == ["model.nbc"] and fr["weight_bytes"] == raw

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
assert np.array_equal(y_served, here)        # bit-identical

# %% code
model = nbcompile.load(path)
print(model.signature["inputs"]["leaves"], "→", model.signature["outputs"]["leaves"])
print("program:", model.metadata["program"]["stablehlo_ops"], "StableHLO ops; weights:",
      {name: shape for name, shape in model.weights.items()})
assert np.array_equal(np.asarray(model(x_new)), here)

# %% md
# ## Freezing strips the training-only work
# A model with **dropout** and **batch norm** computes differently in training: dropout draws
# random numbers to zero activations, and batch norm normalises with the statistics of the
# current batch (updating its running averages as a side effect). For inference both are
# fixed: no random numbers, the stored running averages. Compile the training-mode forward
# pass, then freeze the inference one, and count.

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
RANDOM = {"random_bits", "random_fold_in", "random_split", "threefry2x32", "rng_bit_generator"}

def census(c):
    """Random-number primitives and reductions over the batch axis in a compiled program."""
    eqns = [e for _, e in equation_ids(c.jaxpr)]
    return (sum(e.primitive.name in RANDOM for e in eqns),
            sum(e.primitive.name == "reduce_sum" and 0 in e.params["axes"] for e in eqns))

net.train()
training = nbcompile.compile(net, X)
mean_before = np.asarray(net.bn.mean[...]).copy()
a, b = np.asarray(net(X)), np.asarray(net(X))  # two training-mode calls, run eagerly
moved = float(np.abs(np.asarray(net.bn.mean[...]) - mean_before).max())
net.eval()
inference = nbcompile.compile(net, X)
frozen_path = os.path.join(out, "net.nbc")
inference.freeze(frozen_path)
frozen = nbcompile.load(frozen_path)
text = frozen.exported.mlir_module()
file_ops = collections.Counter(re.findall(r"stablehlo\.([a-z_]+)", text))
train_ops = collections.Counter(re.findall(r"stablehlo\.([a-z_]+)", training.stablehlo))
bits = ("xor", "shift_left", "shift_right_logical", "rng_bit_generator")

for name, c in (("training", training), ("inference", inference)):
    rand, batch = census(c)
    print(f"{name:>9}: {rand} random-number primitives, {batch} reductions over the batch, "
          f"{c.summary()['stablehlo_ops']} StableHLO ops")
print(f"frozen file's program: {sum(file_ops[k] for k in bits)} random-bit ops "
      f"(training program: {sum(train_ops[k] for k in bits)}), {file_ops['reduce']} reduce "
      f"(training: {train_ops['reduce']})")
print(f"training mode, same input twice: outputs differ by up to {np.abs(a - b).max():.3f}; "
      f"the running mean moved by {moved:.4f}")
c1, c2 = np.asarray(frozen(X)), np.asarray(frozen(X))
print(f"frozen, same input twice: differ by {np.abs(c1 - c2).max()}; vs the eval-mode model: "
      f"{np.abs(c1 - np.asarray(net(X))).max():.1e}")

# %% code
assert census(training)[0] > 0 and census(inference)[0] == 0          # dropout's RNG: gone
assert census(training)[1] >= 2 and census(inference)[1] == 0         # batch statistics: gone
assert sum(train_ops[k] for k in bits) > 0 and sum(file_ops[k] for k in bits) == 0
assert train_ops["reduce"] >= 2 and file_ops["reduce"] == 0
assert inference.summary()["stablehlo_ops"] < training.summary()["stablehlo_ops"]
assert np.abs(a - b).max() > 0 and moved > 0                          # training varies...
assert np.array_equal(c1, c2)                                         # ...the frozen model not
np.testing.assert_allclose(c1, np.asarray(net(X)), rtol=1e-5, atol=1e-6)

# %% md
# ## Weights as constants: the TensorFlow-style freeze
# `constants=True` (`--freeze-constants`) bakes the weights into the program itself, so XLA may
# fold weight-only work when it compiles it; the file then has no weight section. Read the file
# back to check.

# %% code
const_path = os.path.join(out, "model_const.nbc")
nbcompile.freeze(predict.compilation.original, params, X, path=const_path, constants=True)
const = nbcompile.load(const_path)
print(f"weights as arguments: {len(model.weights)} weight tensors, program "
      f"{model.metadata['program']['stablehlo_ops']} ops | constants: {len(const.weights)} "
      f"weight tensors, program {const.metadata['program']['stablehlo_ops']} ops, "
      f"{os.path.getsize(const_path)} B file")
assert const.weights == {} and const.metadata["constants_mode"]
assert np.array_equal(np.asarray(const(x_new)), here)

# %% md
# ## A file from elsewhere is a program you have not seen
# Loading a `.nbc` file runs its program, and a file from someone else may be hostile. The
# loader trusts nothing the file says about itself: it reads the program first in a forked
# child process (a crash there refuses the file instead of killing this kernel), checks every
# native kernel the program calls against JAX's own lowering, and, before the first call at
# each new input shape, lowers and shape-refines the program in a child again. A file this
# machine froze skips the children: `freeze` recorded its program as checked when it wrote it.
# Below, the same file loaded as this machine's own, then as if it came from another machine
# (an empty folder of checked programs), each loaded and called on a new batch size.

# %% code
import tempfile
import time

def load_and_call(p, batch):
    t0 = time.perf_counter()
    m = nbcompile.load(p)
    y = np.asarray(m(np.ones((batch, 8), np.float32)))
    return m, y, time.perf_counter() - t0

mine, y_mine, t_mine = load_and_call(path, 3)
saved_dir = os.environ.get("NBCOMPILE_CHECKED_DIR")
os.environ["NBCOMPILE_CHECKED_DIR"] = tempfile.mkdtemp()  # a machine that never saw this file
try:
    foreign, y_foreign, t_foreign = load_and_call(path, 3)
    again, _, t_again = load_and_call(path, 3)  # its checks were recorded: no child this time
finally:
    if saved_dir is None:
        del os.environ["NBCOMPILE_CHECKED_DIR"]
    else:
        os.environ["NBCOMPILE_CHECKED_DIR"] = saved_dir
print(f"frozen here:     written_here={mine.metadata['written_here']}, load + first call "
      f"{t_mine * 1e3:.0f} ms (measured)")
print(f"from elsewhere:  written_here={foreign.metadata['written_here']}, load + first call "
      f"{t_foreign * 1e3:.0f} ms (measured; probe and first-call lowering in children), "
      f"loaded again {t_again * 1e3:.0f} ms (measured; checks recorded)")

# %% code
assert mine.metadata["written_here"] and not foreign.metadata["written_here"]
assert np.array_equal(y_mine, y_foreign)  # the checks change when it runs, not what it computes

# %% md
# ## What you saw
# - One file held the architecture and the trained weights; a fresh process served
#   predictions from it without the source, bit-identical to the notebook.
# - Frozen for inference, a model with dropout and batch norm lost its random-number
#   generation and its batch statistics: fewer ops, and the same output every call, where the
#   training-mode model changed its output and its running averages on every call.
# - Weights can be arguments (a weight section, swappable) or baked-in constants (no weight
#   section, foldable).
# - A file from elsewhere is checked in child processes before its program first runs here
#   (docs/format.md, "Threat model"); a file this machine froze is not checked again.
