# %% md
# # 04 · Automatic differentiation builds the backward graph
#
# **You will learn** what `jax.grad` adds to a program: a *backward* graph, built by JAX's
# automatic differentiation from your forward code (linearise, then transpose) before any
# compiler sees it, plus *residuals* — forward values kept for the backward pass. XLA then
# optimises and fuses the whole forward-and-backward program like any other.
# `%%compile --grad` compiles `value_and_grad` and shows both halves.

# %% code
%load_ext nbcompile
import jax, jax.numpy as jnp, numpy as np

rng = np.random.default_rng(0)
params = {"w1": jnp.asarray(rng.normal(size=(16, 32)) / 4, jnp.float32),
          "w2": jnp.asarray(rng.normal(size=(32, 1)) / 6, jnp.float32)}
x = jnp.asarray(rng.normal(size=(64, 16)), jnp.float32)
y = jnp.asarray(rng.normal(size=(64, 1)), jnp.float32)

# %% code
%%compile --grad
def loss(params, x, y):
    h = jnp.tanh(x @ params["w1"])
    pred = h @ params["w2"]
    return jnp.mean((pred - y) ** 2)
loss(params, x, y)

# %% code
c = loss.compilation
g = c.gradient
print(f"JAX's traced gradient program: forward ops {g.forward_ops}, backward ops {g.backward_ops}")
print("XLA's compiled kernels by phase:", g.kernels,
      f"({sum(g.kernels.values())} kernels for {g.forward_ops + g.backward_ops} traced ops)")
print("forward kernels alone (the plain loss):", c.summary()["kernels"])
for r in g.residuals:
    print(f"residual {r.shape:>12} {r.bytes:>6} B  from line {r.line} ({r.primitive})")
print("residual memory:", sum(r.bytes for r in g.residuals), "bytes")

# %% code
# The backward graph is real work that XLA compiled into kernels of its own, residual bytes add
# up, and the gradient is right.
assert g.backward_ops > 0 and g.forward_ops > 0
assert g.kernels.get("backward", 0) + g.kernels.get("mixed", 0) > 0
assert sum(g.kernels.values()) > c.summary()["kernels"]  # the gradient program is bigger
assert sum(g.kernels.values()) < g.forward_ops + g.backward_ops  # and XLA fused it
assert sum(r.bytes for r in g.residuals) == g.to_json()["residual_bytes"]
value, grads = c.grad.fn(params, x, y)
eps = 1e-2
for name, w in params.items():
    i = (0, 0)
    plus = {**params, name: w.at[i].add(eps)}
    minus = {**params, name: w.at[i].add(-eps)}
    fd = (loss(plus, x, y) - loss(minus, x, y)) / (2 * eps)
    print(f"d loss / d {name}{list(i)}: compiled {float(grads[name][i]):+.5f}   finite difference {float(fd):+.5f}")
    np.testing.assert_allclose(float(grads[name][i]), float(fd), rtol=2e-2, atol=1e-3)

# %% md
# ## What you saw
# - `--grad` compiled the forward *and* the backward program; the backward ops were built by
#   JAX's autodiff from the forward code (`transpose(jvp(...))` in the traced graph), then XLA
#   optimised and fused them into fewer kernels.
# - Residuals are the price of reverse mode: forward values kept in memory for the backward pass.
# - The compiled gradient matches central finite differences.
