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

# %% md
# ## The backward graph JAX built
# Below, every op of the backward half of the traced gradient program, in the order JAX's
# autodiff emitted it — from the last forward line back to the first — with the cell line of
# the forward op it differentiates and what it reads: forward values (*residuals*) and inputs.

# %% code
c = loss.compilation
g = c.gradient
G = c.grad.graph
back = [n for n in G.nodes if n.phase == "backward" and n.kind == "op"]
for n in back:
    reads = [G.node(e.src) for e in G.edges if e.dst == n.id]
    saved = [r.op for r in reads if r.phase == "forward"] + [r.label for r in reads if r.kind == "param"]
    print(f"  line {n.line}  {n.op:<17} {n.shape:<11} {'reads ' + ', '.join(saved) if saved else ''}")
print(f"JAX's traced gradient program: forward ops {g.forward_ops}, backward ops {g.backward_ops}")
print("XLA's compiled kernels by phase:", g.kernels,
      f"({sum(g.kernels.values())} kernels for {g.forward_ops + g.backward_ops} traced ops)")
print("forward kernels alone (the plain loss):", c.summary()["kernels"])
for r in g.residuals:
    print(f"residual {r.shape:>12} {r.bytes:>6} B  from line {r.line} ({r.primitive})")
print("residual memory:", sum(r.bytes for r in g.residuals), "bytes")

# %% md
# Each matrix product `a @ w` has a backward product per differentiated operand: `dw = aᵀ · d`
# always, and `da = d · wᵀ` only when `a` depends on what we differentiate. `h` does, `x` does
# not (the gradient is taken for `params` only): so the first layer's product gets one backward
# product and the second gets two. Counted in XLA's flops (a product of `m×k` by `k×n` is
# `2mkn`), the gradient program should cost the forward plus those three more products, plus
# the element-wise work of the backward: `tanh`'s derivative `1 − a²` times the incoming
# gradient is three flops per hidden value — predicted here from the shapes, before reading
# XLA's figure:

# %% code
B, D, H = x.shape[0], x.shape[1], params["w1"].shape[1]
mm1, mm2 = 2 * B * D * H, 2 * B * H * 1                  # the two forward matrix products
predicted_forward = mm1 + mm2 + 3 * B                    # + the loss: subtract, square, sum
predicted_grad = predicted_forward + mm1 + 2 * mm2 + 3 * B * H  # dw1; dw2 and dh; tanh's derivative
dots = {}
for n in back:
    if n.op == "dot_general":
        dots[n.line] = dots.get(n.line, 0) + 1
forward_flops, grad_flops = c.summary()["flops"], c.grad.summary()["flops"]
print(f"backward matrix products per forward line: {dots}")
print(f"forward: predicted {predicted_forward:,} flops, XLA {forward_flops:,.0f}")
print(f"gradient program: predicted {predicted_grad:,} flops, XLA {grad_flops:,.0f} "
      f"(×{grad_flops / predicted_grad:.4f} the prediction; ×{grad_flops / forward_flops:.2f} the forward)")
# the raw JAX behind c.grad: jit of value_and_grad, lowered, compiled, XLA's cost analysis
raw = jax.jit(jax.value_and_grad(c.original)).lower(params, x, y).compile().cost_analysis()
raw = raw[0] if isinstance(raw, list) else raw  # a list of one on older JAX
print(f"jax.jit(jax.value_and_grad(loss)).lower(...).compile().cost_analysis()['flops']: {raw['flops']:,.0f}")

# %% code
# The backward graph is what autodiff derives from the forward code, its cost is predictable
# from the shapes, XLA compiled and fused it, and the gradient is right.
assert sorted(dots.values()) == [1, 2]  # claim: one-product-per-operand
assert abs(grad_flops / predicted_grad - 1) < 0.01  # claim: grad-flops-predicted
assert forward_flops == predicted_forward and grad_flops == raw["flops"]
assert g.kernels.get("backward", 0) + g.kernels.get("mixed", 0) > 0
assert sum(g.kernels.values()) > c.summary()["kernels"]  # the gradient program is bigger
assert sum(g.kernels.values()) < g.forward_ops + g.backward_ops  # and XLA fused it
assert sum(r.bytes for r in g.residuals) == g.to_json()["residual_bytes"]

# %% code
# the gradient, against central finite differences of the loss
value, grads = c.grad.fn(params, x, y)
eps = 1e-2
for name, w in params.items():
    i = (0, 0)
    plus = {**params, name: w.at[i].add(eps)}
    minus = {**params, name: w.at[i].add(-eps)}
    fd = (loss(plus, x, y) - loss(minus, x, y)) / (2 * eps)
    print(f"d loss / d {name}{list(i)}: compiled {float(grads[name][i]):+.5f}   finite difference {float(fd):+.5f}")
    np.testing.assert_allclose(float(grads[name][i]), float(fd), rtol=2e-2, atol=1e-3)  # claim: grad-matches-fd

# %% md
# ## Backprop as the textbook draws it
# A deeper model, written the way most JAX is: a `layer` function (defined in its own cell, as
# in a real notebook) called from a Python loop. nbcompile records each call while tracing, so
# the program is grouped by *your* calls — `layer#1` … `layer#4` — and with `--grad` each call
# gets its backward group, `layer#3 (backward)`, which the Gradient tab draws facing it: the
# forward pass down one column, the backward pass up the other, the residuals between them.

# %% code
B2, W, DEPTH = 64, 32, 4
ws = [jnp.asarray(rng.normal(size=(W, W)) / np.sqrt(W), jnp.float32) for _ in range(DEPTH)]
h0 = jnp.asarray(rng.normal(size=(B2, W)), jnp.float32)

def layer(w, h):
    return jnp.tanh(h @ w)

# %% md
# **Predict first.** How many bytes of residuals will each `layer` call save for its own
# backward pass? Think about what the backward pass of `tanh(h @ w)` reads: `dw = hᵀ · d` and
# `dh = d · wᵀ` read only the layer's arguments (the caller keeps those), but the derivative of
# `tanh` is `1 − a²`, with `a = tanh(h @ w)`: the layer must keep `1 − a²`, or `a` to compute it
# from, or both. Write down your bounds (in `B × W` float32 tensors) before opening the hidden
# cell; which of them JAX keeps is its `tanh` rule's choice, and JAX's own
# `jax.ad_checkpoint.print_saved_residuals` lists it.

# %% code
%%compile --grad
def deep_loss(ws, h):
    for w in ws:
        h = layer(w, h)
    return (h ** 2).mean()
deep_loss(ws, h0)

# %% code hide
import contextlib, io
from jax.ad_checkpoint import print_saved_residuals
tensor = B2 * W * 4                # one B×W float32 tensor
listed = io.StringIO()
with contextlib.redirect_stdout(listed):
    print_saved_residuals(layer, ws[0], h0)   # JAX's own list of what one call keeps
print(listed.getvalue(), end="")
kept = [ln for ln in listed.getvalue().splitlines() if "from the argument" not in ln]
jax_saved = len(kept) * tensor
d = deep_loss.compilation
pairs = [(f, b, n) for f, b, n in d.gradient.pairs if f.startswith("layer#") and "/" not in f]
per_layer = [n for _, _, n in pairs]
print(f"answer: between {tensor:,} (1 − a² alone) and {2 * tensor:,} bytes per layer (a too); "
      f"JAX keeps {jax_saved:,} ({len(kept)} tensor(s)); the traced gradient program, per layer: {per_layer}")
assert per_layer == [jax_saved] * DEPTH and tensor <= jax_saved <= 2 * tensor  # claim: residuals-per-layer

# %% code
print(f"{'forward':<10} {'residuals':>12}   backward")
for f, b, n in pairs:
    print(f"{f:<10} ──{n:>8,} B ──▶  {b}")

# %% code
# One group per call, each facing its own backward group.
assert [f for f, _, _ in pairs] == [f"layer#{k}" for k in range(1, DEPTH + 1)]
assert all(b == f + " (backward)" for f, b, _ in pairs)

# %% md
# ## What you saw
# - `--grad` compiled the forward *and* the backward program; the backward ops were built by
#   JAX's autodiff from the forward code (`transpose(jvp(...))` in the traced graph), last line
#   first, then XLA optimised and fused them into fewer kernels.
# - The gradient's cost followed from the shapes: one backward product per differentiated
#   operand of each forward product, plus tanh's derivative; XLA's flop count matched the
#   prediction to within a per-row handful of flops, and JAX's own `cost_analysis()` gives it.
# - Residuals are the price of reverse mode: forward values kept in memory for the backward pass.
# - The compiled gradient matches central finite differences.
# - Written as plain functions called from a loop, the program is grouped by your calls, and
#   each call's backward group holds the residuals predicted from the chain rule.
