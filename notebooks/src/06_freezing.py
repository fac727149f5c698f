# %% md
# # 06 · Freezing: one file with the architecture and the trained weights
#
# **You will learn** what a *frozen* model is: the compiled program and its trained weights in
# one file that serves predictions in a fresh process — without your source code, your
# training data or nbcompile's notebook — giving the same output for the same input. And that
# freezing for inference drops the training-only work.

# %% code
%load_ext nbcompile
import subprocess, sys
import jax, jax.numpy as jnp, numpy as np
import nbcompile

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
%%compile --freeze model.nbc
def predict(params, x):
    return jnp.tanh(x @ params["w1"]) @ params["w2"]
predict(params, X)

# %% code
fr = predict.compilation.extras["freeze"]
print(fr["text"])
raw = sum(np.asarray(v).nbytes for v in jax.tree_util.tree_leaves(params))
print(f"file {fr['file_bytes']} B for {raw} B of weights; platforms {fr['platforms']}")
train = nbcompile.compile(loss, params, X, Y, grad=0)
print("training graph (value_and_grad) StableHLO ops:", train.grad.summary()["stablehlo_ops"],
      "| frozen inference program ops:", fr["program_ops"])
assert fr["weight_bytes"] == raw
assert fr["program_ops"] < train.grad.summary()["stablehlo_ops"]

# %% md
# ## Serve it in a fresh process, without the source
# A new Python process that never saw `predict` loads the file and predicts — on a batch of 5,
# though it was frozen with 256 examples: the batch dimension is exported as a symbolic `b`.
# The loader checks size, magic, version, checksums and weight layout *before* deserialising
# anything, and never runs code from the file.

# %% code
x_new = np.asarray(rng.normal(size=(5, 8)), np.float32)  # any batch size: frozen with a symbolic `b`
np.save("x.npy", x_new)
out = subprocess.run([sys.executable, "-m", "nbcompile.cli", "run", "model.nbc",
                      "--input", "x.npy", "--output", "y.npy"], capture_output=True, text=True)
print(out.stdout or out.stderr)
served = np.load("y.npy")
here = np.asarray(predict(params, x_new))
print("fresh process:", served[:2].ravel(), "| notebook:", here[:2].ravel())
assert out.returncode == 0
assert np.array_equal(served, here)        # bit-identical

# %% code
model = nbcompile.load("model.nbc")
print(model.signature["inputs"]["leaves"], "→", model.signature["outputs"]["leaves"])
assert np.array_equal(np.asarray(model(x_new)), here)
info = subprocess.run([sys.executable, "-m", "nbcompile.cli", "inspect", "model.nbc"],
                      capture_output=True, text=True)
print(info.stdout[:1200])
assert info.returncode == 0

# %% md
# ## Weights as constants: the TensorFlow-style freeze
# `--freeze-constants` bakes the weights into the program, so XLA may fold weight-only work;
# the file is then one program with no weight section.

# %% code
const = nbcompile.freeze(predict.compilation.original, params, X, path="model_const.nbc", constants=True)
print(const.text())
assert np.array_equal(np.asarray(nbcompile.load("model_const.nbc")(x_new)), here)

# %% md
# ## What you saw
# - One file held the architecture and the trained weights; a fresh process served
#   predictions from it without the source, bit-identical to the notebook.
# - The frozen inference program is much smaller than the training graph (no backward pass).
# - Weights can be arguments (small, swappable) or baked-in constants (foldable).
