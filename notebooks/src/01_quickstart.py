# %% md
# # 01 · Quickstart: `%%compile` a model and see what XLA did
#
# **You will learn** how to compile a model written in a notebook cell with one line, what you
# get back, and how to read the view: the traced graph, the kernels XLA fused and the cell lines
# each kernel came from.

# %% code
%load_ext nbcompile
import re
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
    print(f"{f.name:>26}  {f.kind:<7} ops={len(f.ops):>2}  cell lines {f.source_lines}")

# %% md
# **The same figures from JAX itself.** `%%compile` calls JAX's own ahead-of-time API; every
# figure above can be had without nbcompile. `jax.jit(f).lower(*args)` traces and lowers,
# `.compile()` runs XLA, and the compiled program's text (`.as_text()`) lists its kernels: the
# instructions of its `ENTRY` computation that are not parameters or constants. Op by op, JAX
# dispatches one kernel per primitive of the traced program (`jax.make_jaxpr`), counting those
# inside a call such as `custom_jvp_call` (since JAX 0.12.1 `jax.nn.softmax` stays one).

# %% code
raw = jax.jit(c.original).lower(params, x).compile()   # what %%compile did, by hand
entry = raw.as_text().split("\nENTRY ", 1)[1]
raw_kernels = re.findall(r"= \S+ (\w[\w-]*)\(", entry)
raw_kernels = [op for op in raw_kernels if op not in ("parameter", "constant")]
def primitives_in(jaxpr):  # the primitives op by op runs: a call's body, not the call
    out = []
    for eqn in jaxpr.eqns:
        bodies = [v for v in eqn.params.values() if hasattr(v, "eqns")]
        out += [p for b in bodies for p in primitives_in(b)] if bodies else [eqn.primitive.name]
    return out
primitives = primitives_in(jax.make_jaxpr(c.original)(params, x))
print(f"jax.jit(...).lower(...).compile().as_text(): {len(raw_kernels)} kernels {sorted(set(raw_kernels))}; "
      f"jax.make_jaxpr: {len(primitives)} primitives")

# %% code
# The claims above, checked: compiled output equals jax.jit of the original; XLA fused ops.
ref = jax.jit(c.original)(params, x)
assert np.array_equal(np.asarray(predict(params, x)), np.asarray(ref)), "predict differs from jax.jit of the original"
assert len(raw_kernels) == c.summary()["kernels"] and len(primitives) == c.summary()["eager_kernels"], (
    "JAX's own counts differ", len(raw_kernels), len(primitives), c.summary())
assert c.summary()["kernels"] < c.summary()["eager_kernels"], c.summary()  # claim: fewer-kernels

# %% md
# **Predict first.** Each kernel knows the cell lines its ops came from. Counting the
# `%%compile` line as line 1, the cell's line 3 is `h = x @ params["w1"] + params["b1"]`, line 4
# `h = jax.nn.gelu(h)`, line 5 the second matrix product and line 6 the softmax. XLA:CPU hands a matrix product to a library kernel of its own
# and fuses element-wise work into the kernel that consumes it. Before running the next cell,
# write down which lines the kernel holding gelu's `tanh` will name, and which lines the two
# matrix products' kernels name.

# %% code hide
lines_of = {f.name: set(f.source_lines) for f in c.fusions}
gelu_kernel = next(f.name for f in c.fusions if "tanh" in f.ops)
dot_kernels = [f.name for f in c.fusions if f.ops == ["dot"]]
print(f"answer: the tanh kernel {gelu_kernel} names lines {sorted(lines_of[gelu_kernel])} (the bias "
      f"add of line 3 fused into gelu's kernel); the matrix products: "
      f"{[sorted(lines_of[k]) for k in dot_kernels]}; the rest (softmax): "
      f"{sorted({n for k, ls in lines_of.items() if k not in dot_kernels + [gelu_kernel] for n in ls})}")
assert lines_of[gelu_kernel] == {3, 4}, lines_of  # claim: kernel-lines
assert [lines_of[k] for k in dot_kernels] == [{3}, {5}], ("the matrix products' lines", lines_of)
assert all(ls == {6} for k, ls in lines_of.items() if k not in dot_kernels + [gelu_kernel]), ("softmax's lines", lines_of)

# %% md
# Re-running an unchanged cell does not compile again (nbcompile keys the cell by its source,
# argument shapes, options and versions). To see that the check below could fail, count XLA's
# compiles with JAX's own monitoring hook — then change one line and count again.

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
compiles_rerun = len(events)
print("XLA compiles during the unchanged re-run:", compiles_rerun)
assert compiles_rerun == 0, events  # claim: rerun-free

# %% code
%%compile -q
def predict(params, x):
    h = x @ params["w1"] + params["b1"]
    h = jax.nn.gelu(h, approximate=False)   # changed: the exact (erf) gelu
    logits = h @ params["w2"]
    return jax.nn.softmax(logits)
predict(params, x)

# %% code
compiles_edited = len(events) - compiles_rerun
print("XLA compiles after changing line 4:", compiles_edited)
print("what changed:", predict.compilation.changes)
# the positive control: the counter does count compiles
assert compiles_edited >= 1, ("the edited cell compiled nothing the listener saw", events)

# %% md
# ## What you saw
# - `%%compile` turned a cell into a compiled `jax.jit` function and showed what XLA did.
# - XLA ran fewer kernels than op-by-op execution dispatches: it fused element-wise work into
#   a few kernels, and each kernel knows the cell lines it came from.
# - The same figures come from JAX's own API: `jax.jit(f).lower(*args).compile()` and its
#   `.as_text()`, and `jax.make_jaxpr` for the primitives.
# - Re-running an unchanged cell is free: XLA compiled nothing; after a one-line change it
#   compiled again. Next: `02_what_compiling_does.ipynb`.
