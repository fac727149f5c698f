"""Small models shared by the target tests (and the mesh child process)."""

from __future__ import annotations

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
