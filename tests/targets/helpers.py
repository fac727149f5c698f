"""Small models shared by the target tests (and the mesh child process)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def mlp(params, x):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return h @ params["w2"]


def mlp_args(batch: int = 16, d_in: int = 64, d_hidden: int = 128, d_out: int = 32):
    rng = np.random.default_rng(0)
    params = {
        "w1": jnp.asarray(rng.standard_normal((d_in, d_hidden)), jnp.float32),
        "b1": jnp.zeros((1, d_hidden), jnp.float32),
        "w2": jnp.asarray(rng.standard_normal((d_hidden, d_out)), jnp.float32),
    }
    return params, jnp.ones((batch, d_in), jnp.float32)


#: batch over "data", hidden units over "model" (Megatron-style column then row split)
MLP_SHARDING = {
    "x": "data,None",
    "params.w1": "None,model",
    "params.b1": "None,model",
    "params.w2": "model,None",
}


def loop(w, x):
    """A ``while`` loop: its body's kernels count as the program's kernels."""
    return jax.lax.fori_loop(0, 5, lambda i, h: jnp.tanh(h @ w) + 1.0, x)


def branch(w, x):
    """A ``conditional`` with two branch computations."""
    return jax.lax.cond(x.sum() > 0, lambda v: jnp.sin(v @ w), lambda v: jnp.cos(v) * 2.0, x)


def train_step(params, x):
    def loss(p):
        return jnp.mean(mlp(p, x) ** 2)

    value, grads = jax.value_and_grad(loss)(params)
    return value, jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)


def loop_args():
    params = mlp_args()[0]
    return params["w1"][:, :64], jnp.ones((16, 64), jnp.float32)


def collective_program(mesh):
    """Every collective JAX emits from ``shard_map`` over the mesh's ``data`` axis."""
    from jax.sharding import PartitionSpec

    n = mesh.shape["data"]

    def body(x):
        y = jax.lax.ppermute(x, "data", [(i, (i + 1) % n) for i in range(n)])
        g = jax.lax.all_gather(y, "data", tiled=True)
        s = jax.lax.psum_scatter(g * 2.0, "data", tiled=True)
        a = jax.lax.all_to_all(s, "data", 0, 0, tiled=True)
        return a + jax.lax.psum(x, "data")

    spec = PartitionSpec("data")
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec))


def collective_args(mesh):
    return (jnp.ones((16 * mesh.shape["data"], 128), jnp.float32),)
