# %% md
# # 07 · Eager vs compiled, and debugging a static graph
#
# **You will learn** when compiling makes a model faster (and when it does not), measured on
# this machine — and why a compiled, fused graph is harder to debug, and how `--debug` gets
# every intermediate back, down to the source line of a NaN.

# %% code
%load_ext nbcompile
import jax, jax.numpy as jnp, numpy as np

rng = np.random.default_rng(0)
d = 128
x = jnp.asarray(rng.normal(size=(64, d)), jnp.float32)
p = {k: jnp.asarray(rng.normal(size=(d, d)) / np.sqrt(d), jnp.float32) for k in ("q", "k", "v", "o")}

# %% md
# ## A transformer-style block: many small ops
# Eagerly, every op is dispatched from Python one at a time. Compiled, XLA runs a few fused
# kernels. `--bench` measures both (medians over repeated runs), and the compile time.

# %% code
%%compile --bench
def attention(p, x):
    q, k, v = x @ p["q"], x @ p["k"], x @ p["v"]
    s = jax.nn.softmax(q @ k.T / np.sqrt(d), axis=-1)
    h = x + (s @ v) @ p["o"]
    mu = h.mean(-1, keepdims=True)
    return (h - mu) / jnp.sqrt(((h - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
attention(p, x)

# %% code
b = attention.compilation.extras["bench"]
print(f"eager {b['eager']['median'] * 1e3:.2f} ms vs compiled {b['compiled']['median'] * 1e3:.2f} ms"
      f" → ×{b['speedup']:.1f}; compile took {b['compile_seconds']:.2f} s;"
      f" pays for itself after {b['break_even_calls']} calls")
print("kernels: eager", b["eager_kernels"], "compiled", b["compiled_kernels"])
assert b["eager_kernels"] > b["compiled_kernels"]

# %% md
# ## A matmul-bound MLP: most of the work is already one library call per op
# When nearly all the arithmetic is in a few large matrix multiplies, eager execution already
# runs each one as a single library call, so compiling can only save the few small ops around
# them. Compare the measured speed-up with the attention block's (when it is small, nbcompile's
# `why` says what dominates).

# %% code
W1 = jnp.asarray(rng.normal(size=(1024, 1024)) / 32, jnp.float32)
W2 = jnp.asarray(rng.normal(size=(1024, 1024)) / 32, jnp.float32)
big = jnp.asarray(rng.normal(size=(512, 1024)), jnp.float32)

# %% code
%%compile --bench -q
def mlp(big, W1, W2):
    return jnp.maximum(big @ W1, 0.0) @ W2
mlp(big, W1, W2)

# %% code
b = mlp.compilation.extras["bench"]
print(f"speed-up ×{b['speedup']:.2f} (attention block: ×{attention.compilation.extras['bench']['speedup']:.1f});"
      f" share of arithmetic in dot ops: {b['dot_flop_fraction']:.0%}")
print("kernels: eager", b["eager_kernels"], "compiled", b["compiled_kernels"], "| why:", b.get("why"))
assert b["dot_flop_fraction"] > 0.9
assert b["eager_kernels"] - b["compiled_kernels"] <= 2  # little left for XLA to fuse

# %% md
# ## Debugging a static graph
# In the compiled program, intermediates that were fused away never exist in memory, and a NaN
# appears only in the output. `--debug` runs the traced program op by op, keeps a summary of
# every intermediate, and stops at the first NaN with its source line.

# %% code
%%compile --debug -q
def unstable(x):
    big = jnp.exp(x * 100.0)          # overflows to inf for large x
    ratio = big / big                 # inf / inf = NaN
    return jnp.tanh(ratio).mean()
unstable(x)

# %% code
dbg = unstable.compilation.debug
print(dbg.text())
assert dbg.stopped and dbg.nan_at["line"] == 4 and dbg.nan_at["primitive"] == "div"
# The compiled program computes exp in a fused kernel; whether the NaN even shows there
# depends on how XLA evaluated it. The op-by-op run is the ground truth:
print("compiled output:", float(unstable(x)), "| op-by-op output: NaN at line", dbg.nan_at["line"])

# %% md
# Every intermediate has a summary, including values XLA fused away:

# %% code
%%compile --debug -q
def healthy(x):
    h = jnp.tanh(x @ p["q"])
    return (h * 2.0 + 1.0).sum()
healthy(x)

# %% code
dbg = healthy.compilation.debug
tanh_id = next(i for i, s in dbg.summaries.items() if s["primitive"] == "tanh")
out = dbg.summaries[tanh_id]["outputs"][0]
print(tanh_id, out["shape"], "min/max", out["min"], out["max"])
np.testing.assert_allclose(np.asarray(dbg.value(tanh_id)), np.asarray(jnp.tanh(x @ p["q"])), rtol=1e-5)
np.testing.assert_allclose(float(dbg.outputs[0]), float(healthy(x)), rtol=1e-5)

# %% md
# ## What you saw
# - Compiling a block of many small ops gave a measured speed-up; a matmul-bound MLP gained
#   little, and the report said why.
# - `--debug` found the NaN at its source line and primitive, and recovered an intermediate the
#   compiled program never materialises.
