# %% md
# # 01 · Quickstart: `%%compile` a model and see what XLA did
#
# **You will learn** how to compile a model written in a notebook cell with one line, what you
# get back, and how to read the view: the traced graph, the kernels XLA fused and the cell lines
# each kernel came from.

# %% code
%load_ext nbcompile
import jax, jax.numpy as jnp, numpy as np

rng = np.random.default_rng(0)
params = {
    "w1": jnp.asarray(rng.normal(size=(64, 128)) / 8, jnp.float32),
    "b1": jnp.zeros((1, 128), jnp.float32),
    "w2": jnp.asarray(rng.normal(size=(128, 10)) / 11, jnp.float32),
}
x = jnp.asarray(rng.normal(size=(32, 64)), jnp.float32)

# %% md
# Put `%%compile` on top of a cell. Its last line is the *example call*: nbcompile traces that
# function with those arguments, lowers it to StableHLO, compiles it with XLA and shows the view.

# %% code
%%compile
def predict(params, x):
    h = x @ params["w1"] + params["b1"]
    h = jax.nn.gelu(h)
    logits = h @ params["w2"]
    return jax.nn.softmax(logits)
predict(params, x)

# %% md
# `predict` is now the compiled function: a real `jax.jit` object (same signature, same speed)
# that carries `.compilation`, everything the compiler produced.

# %% code
c = predict.compilation
print(type(predict).__name__)
print(c.summary()["kernels"], "kernels run, where running it op by op (jax.disable_jit) would "
      "dispatch", c.summary()["eager_kernels"], "primitives, one kernel each")
for f in c.fusions:
    print(f"{f.name:>16}  {f.kind:<7} ops={len(f.ops):>2}  cell lines {f.source_lines}")

# %% code
# The claims above, checked: compiled output equals jax.jit of the original; XLA fused ops.
ref = jax.jit(c.original)(params, x)
assert np.array_equal(np.asarray(predict(params, x)), np.asarray(ref))
assert c.summary()["kernels"] < c.summary()["eager_kernels"]
assert all(set(f.source_lines) <= {2, 3, 4, 5, 6} for f in c.fusions)
assert any(f.source_lines for f in c.fusions)

# %% md
# Re-running an unchanged cell does not compile again (nbcompile keys the cell by its source,
# argument shapes, options and versions). Change a line and the view shows what changed.

# %% code
events = []
jax.monitoring.register_event_duration_secs_listener(
    lambda name, *a, **k: events.append(name) if name.endswith("backend_compile_duration") else None)

# %% code
%%compile -q
def predict(params, x):
    h = x @ params["w1"] + params["b1"]
    h = jax.nn.gelu(h)
    logits = h @ params["w2"]
    return jax.nn.softmax(logits)
predict(params, x)

# %% code
assert events == [], events  # the re-run did not touch XLA
print("XLA compiles during the re-run:", len(events))

# %% md
# ## What you saw
# - `%%compile` turned a cell into a compiled `jax.jit` function and showed what XLA did.
# - XLA ran fewer kernels than op-by-op execution dispatches: it fused element-wise work into
#   a few kernels, and each kernel knows the cell lines it came from.
# - Re-running an unchanged cell is free. Next: `02_what_compiling_does.ipynb`.
