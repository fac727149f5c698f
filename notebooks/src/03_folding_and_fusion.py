# %% md
# # 03 · Constant folding and operator fusion
#
# **You will learn** the two optimisations that remove most of the work in a compiled model:
# *constant folding* (computing constant sub-expressions at compile time) and *operator fusion*
# (running several ops as one kernel so intermediates never travel through memory) — each
# shown on a model and measured by switching it off.

# %% code
%load_ext nbcompile
import jax, jax.numpy as jnp, numpy as np
import nbcompile

rng = np.random.default_rng(0)
A = rng.normal(size=(128, 128)).astype(np.float32)
B = rng.normal(size=(128, 128)).astype(np.float32)
x = jnp.asarray(rng.normal(size=(32, 128)), jnp.float32)

# %% md
# ## Constant folding
# `A @ B` uses only constants, so XLA can compute it once, while compiling.

# %% code
%%compile
def project(x):
    M = jnp.asarray(A) @ jnp.asarray(B)   # constant: folded at compile time
    return x @ M
project(x)

# %% code
c = project.compilation
for f in c.folded:
    print(f"{f.stage:>8}  folded={f.folded!s:5}  {f.what}  {f.shape}  line {f.line}")

# Switch XLA's constant_folding pass off and compile the same program again.
unfolded = nbcompile.compile(c.original, x, compiler_options={"xla_disable_hlo_passes": "constant_folding"})
print("kernels with folding:", c.summary()["kernels"], "| without:", unfolded.summary()["kernels"])

# %% code
assert any(f.stage == "xla" and f.folded for f in c.folded)
assert not any(f.stage == "xla" and f.folded for f in unfolded.folded)
assert unfolded.summary()["kernels"] > c.summary()["kernels"]
np.testing.assert_allclose(np.asarray(project(x)), np.asarray(x @ (A @ B)), rtol=2e-3, atol=2e-2)

# %% md
# Not everything constant is folded: XLA:CPU does **not** fold `iota` (`arange`) expressions —
# nbcompile reports that honestly instead of pretending.

# %% code
%%compile -q
def with_iota(x):
    return x[:4, :4] @ (jnp.arange(16.0).reshape(4, 4) @ jnp.ones((4, 4)))
with_iota(x)

# %% code
iota = [f for f in with_iota.compilation.folded if "iota" in f.what or "arange" in f.what or "iota" in f.ops]
for f in with_iota.compilation.folded:
    print(f.stage, f.folded, f.what)
assert iota and not any(f.folded for f in iota)

# %% md
# ## Operator fusion
# An element-wise chain: six rounds of gelu, scale and shift. Eagerly, each op is a kernel that
# reads and writes the whole array. XLA fuses the chain into a few kernels.

# %% code
y = jnp.asarray(rng.normal(size=(1024, 1024)), jnp.float32)

# %% code
%%compile --ablate
def chain(y):
    for _ in range(6):
        y = jax.nn.gelu(y) * 1.1 + 0.1
    return y
chain(y)

# %% code
c = chain.compilation
s = c.summary()
print("eager kernels:", s["eager_kernels"], "| compiled kernels:", s["kernels"])
print("bytes of intermediates kept out of memory by fusion:", s["bytes_saved_by_fusion"])
ab = {v["name"]: v for v in c.extras["ablate"]["variants"]}
for name, v in ab.items():
    t = v["time"]["median"] if v.get("time") else float("nan")
    print(f"{name:>16}: {v['kernels']:>3} kernels, {t * 1e3:7.2f} ms, ×{v.get('ratio') or 1:.2f}")

# %% code
assert s["kernels"] < s["eager_kernels"]
assert s["bytes_saved_by_fusion"] > 0
assert ab["no_fusion"]["changed"] and ab["no_fusion"]["kernels"] > ab["baseline"]["kernels"]
assert ab["no_fusion"]["time"]["median"] > 0 and ab["baseline"]["time"]["median"] > 0
print(f"fusion bought ×{ab['no_fusion']['time']['median'] / ab['baseline']['time']['median']:.1f} here")

# %% md
# ## What you saw
# - Constant sub-expressions (`A @ B`) became one constant at compile time; with the pass off
#   they are computed at run time again. `iota` expressions are not folded on XLA:CPU.
# - Fusion ran a 36-op chain as a handful of kernels, kept intermediates out of memory, and the
#   ablation measured what that bought on this machine.
