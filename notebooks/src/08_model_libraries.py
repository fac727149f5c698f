# %% md
# # 08 · Models as people write them: a Flax NNX model end to end
#
# **You will learn** that `%%compile` takes a Flax NNX model as it is — `model(x)` on the last
# line — makes its parameters inputs of the compiled program (not baked-in constants), and
# speaks in the model's structure: graph groups and fusions carry module paths such as
# `MLP/hidden`. Equinox modules, Flax Linen (`model.apply`) and Keras 3 models on JAX work the
# same way (`nbcompile[flax]`, `nbcompile[equinox]`, `nbcompile[keras]`).

# %% code
%load_ext nbcompile
import jax, jax.numpy as jnp, numpy as np
from flax import nnx
import nbcompile


class MLP(nnx.Module):
    def __init__(self, rngs):
        self.hidden = nnx.Linear(32, 64, rngs=rngs)
        self.out = nnx.Linear(64, 10, rngs=rngs)

    def __call__(self, x):
        return self.out(jax.nn.gelu(self.hidden(x)))


model = MLP(nnx.Rngs(0))
x = jnp.asarray(np.random.default_rng(0).normal(size=(16, 32)), jnp.float32)

# %% code
%%compile
model(x)

# %% code
c = nbcompile.last()
paths = sorted({n.path for n in c.graph.nodes if n.path})
print("module paths in the graph:", paths)
print("fusions and the modules they span:")
for f in c.fusions:
    print(f"  {f.name:<28} {f.modules}")
n_params = sum(np.size(v) for v in jax.tree_util.tree_leaves(nnx.state(model, nnx.Param)))
print("parameters:", n_params, "| largest constant baked into the program:",
      max((np.size(v) for v in c.jaxpr.consts), default=0), "elements")

# %% md
# **Predict first.** The parameters are inputs of the compiled program, so XLA's buffer
# assignment counts them among its arguments. How many bytes of arguments will the compiled
# program take: `hidden` is a 32→64 `Linear` (kernel and bias), `out` a 64→10 one, and `x` has
# shape `(16, 32)`, all float32? The hidden cell asks JAX itself (`memory_analysis()` of the compiled
# program) and also compiles the same model by hand: `nnx.split` it into a graph definition and
# a state (the arrays), and jit a function of the state.

# %% code hide
predicted_args = 4 * ((32 * 64 + 64) + (64 * 10 + 10) + x.size)
graphdef, state = nnx.split(model)
raw = jax.jit(lambda state, x: nnx.merge(graphdef, state)(x)).lower(state, x).compile()
print(f"answer: 4 × ({32 * 64 + 64} + {64 * 10 + 10} + {x.size}) = {predicted_args:,} bytes; "
      f"c.compiled.memory_analysis(): {c.compiled.memory_analysis().argument_size_in_bytes:,}; "
      f"by hand with nnx.split and jax.jit(...).lower(state, x).compile(): "
      f"{raw.memory_analysis().argument_size_in_bytes:,}")
assert c.compiled.memory_analysis().argument_size_in_bytes == predicted_args
assert raw.memory_analysis().argument_size_in_bytes == predicted_args

# %% md
# Had the model been *closed over* instead — `lambda x: model(x)`, the model not an argument —
# JAX would have captured its arrays as constants of the program: the control below shows it.

# %% code
closed = nbcompile.compile(lambda x_: model(x_), x)
largest_const = max((np.size(v) for v in closed.jaxpr.consts), default=0)
print(f"closed over: largest constant baked into the program {largest_const} elements")

# %% code
assert max((np.size(v) for v in c.jaxpr.consts), default=0) < 16  # claim: params-are-inputs
assert largest_const >= 32 * 64                                      # the control: closed over, they are constants
assert any("hidden" in p for p in paths) and any("out" in p for p in paths)
assert any(any("hidden" in m for m in f.modules) for f in c.fusions)  # claim: fusions-name-modules
# the graph roots its groups at the argument (`model/...`); a fusion names the module path
# inside it: every fusion module is the tail of a graph path, never a doubled one
assert all(any(g.endswith(m) for g in paths) for f in c.fusions for m in f.modules)
assert not any("MLP/MLP" in m for f in c.fusions for m in f.modules)
np.testing.assert_allclose(np.asarray(c.fn(*c.args)), np.asarray(nnx.jit(lambda m, x: m(x))(model, x)),
                           rtol=1e-6, atol=1e-6)

# %% md
# ## Gradient with respect to the model's parameters
# For a loss that takes the model, `--grad` differentiates with respect to the model's
# parameters — the same numbers as `nnx.grad`.

# %% code
y = jnp.asarray(np.random.default_rng(1).normal(size=(16, 10)), jnp.float32)

# %% code
%%compile --grad -q
def loss(model, x, y):
    return jnp.mean((model(x) - y) ** 2)
loss(model, x, y)

# %% code
c = nbcompile.last()
_, grads = c.grad.fn(*c.args)
ref = nnx.grad(loss)(model, x, y)
np.testing.assert_allclose(np.asarray(grads["hidden"]["kernel"]), np.asarray(ref["hidden"]["kernel"][...]), rtol=1e-5, atol=1e-6)
print("backward ops:", c.gradient.backward_ops, "| residual bytes:", c.gradient.to_json()["residual_bytes"])

# %% md
# ## What you saw
# - The NNX model compiled as written; its parameters are program inputs (their bytes among
#   the compiled program's arguments, as predicted; closed over, they became constants), so
#   the compiled program works for any weights of the same shapes.
# - The graph and the fusions speak in module paths (`hidden`, `out`).
# - `--grad` gave the same gradients as `nnx.grad`.
