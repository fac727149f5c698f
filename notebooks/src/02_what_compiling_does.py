# %% md
# # 02 · What compiling does: Python → jaxpr → StableHLO → optimised HLO
#
# **You will learn** the three programs a model becomes on its way to the hardware, and how big
# each is: JAX *traces* your Python into a jaxpr (a graph of primitives), *lowers* it to
# StableHLO (a portable compiler IR), and XLA *optimises and compiles* that for one target.

# %% code
%load_ext nbcompile
import jax, jax.numpy as jnp, numpy as np

rng = np.random.default_rng(0)
params = {"w": jnp.asarray(rng.normal(size=(256, 256)) / 16, jnp.float32),
          "scale": jnp.ones((1, 256), jnp.float32)}
x = jnp.asarray(rng.normal(size=(64, 256)), jnp.float32)

# %% code
%%compile
def layer(params, x):
    h = x @ params["w"]
    mu = h.mean(axis=-1, keepdims=True)
    var = ((h - mu) ** 2).mean(axis=-1, keepdims=True)
    h = (h - mu) / jnp.sqrt(var + 1e-5) * params["scale"]
    return jax.nn.relu(h)
layer(params, x)

# %% md
# ## 1. The traced graph (jaxpr)
# Tracing ran `layer` once with abstract values (shapes and dtypes only) and recorded every
# primitive it called. Python control flow and function calls are gone; what is left is a graph.

# %% code
c = layer.compilation
print(c.jaxpr.pretty_print(use_color=False)[:900])

# %% md
# ## 2. StableHLO, then XLA's optimised program
# The same graph, lowered to StableHLO, then optimised by XLA for this machine's CPU. Count the
# operations at each level, and the *kernels* that actually run.

# %% code
s = c.summary()
print(f"jaxpr equations        {s['jaxpr_eqns']:>4}")
print(f"StableHLO operations   {s['stablehlo_ops']:>4}")
print(f"HLO before optimising  {s['hlo_ops_before']:>4}")
print(f"kernels after XLA      {s['kernels']:>4}   ({s['fusions']} of them fusions)")
print(f"eager would launch     {s['eager_kernels']:>4}   kernels, one per primitive")
print("\n".join(c.hlo.splitlines()[:3]))

# %% code
# Checked: the graph has one node per primitive, and XLA runs fewer kernels than eager would.
assert s["jaxpr_eqns"] >= len(c.jaxpr.jaxpr.eqns)  # nested calls (relu, ...) count too
assert {e.primitive.name for e in c.jaxpr.jaxpr.eqns} <= {n.op for n in c.graph.nodes}
assert s["kernels"] < s["eager_kernels"]
assert "fusion" in c.hlo

# %% md
# ## 3. Compiled for one target
# The optimised program is specific to the backend it was compiled for (here the CPU): the
# kernels, their layouts and XLA's cost estimates all belong to this target.

# %% code
print(c.backend, "| flops:", c.cost["flops"], "| bytes accessed:", c.cost["bytes_accessed"])
print("compile seconds:", round(c.timings["compile"], 3))
assert c.backend == jax.default_backend()
assert c.cost["flops"] >= 2 * 64 * 256 * 256  # at least the matmul's multiply-adds

# %% md
# ## What you saw
# - Tracing turned Python into a graph of primitives (the jaxpr).
# - Lowering gave StableHLO; XLA then optimised it into fewer *kernels* than there are ops.
# - The result is for one target: counts, costs and timings are measured, not asserted.
#   Next: `03_folding_and_fusion.ipynb` shows *which* optimisations removed the work.
