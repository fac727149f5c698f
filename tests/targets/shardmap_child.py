"""Child process (8 virtual CPU devices): JAX's shard_map guide example, as written, through
nbcompile on the CPU mesh it names, and its abstract-mesh form for a deviceless TPU.
Prints one JSON line."""

from __future__ import annotations

import json
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import nbcompile
from nbcompile.errors import TargetError

# From JAX's docs/notebooks/shard_map.md ("matmul_basic"), sizes as in the guide.
mesh = jax.make_mesh((4, 2), ("x", "y"))
a = jax.device_put(jnp.arange(8 * 16.0).reshape(8, 16), NamedSharding(mesh, P("x", "y")))
b = jax.device_put(jnp.arange(16 * 4.0).reshape(16, 4), NamedSharding(mesh, P("y", None)))


@jax.jit
@partial(jax.shard_map, mesh=mesh, in_specs=(P("x", "y"), P("y", None)), out_specs=P("x", None))
def matmul_basic(a_block, b_block):
    c_partialsum = jnp.dot(a_block, b_block)
    return jax.lax.psum(c_partialsum, "y")


@jax.jit
@partial(
    jax.shard_map,
    mesh=mesh.abstract_mesh,
    in_specs=(P("x", "y"), P("y", None)),
    out_specs=P("x", None),
)
def matmul_abstract(a_block, b_block):
    return jax.lax.psum(jnp.dot(a_block, b_block), "y")


want = np.asarray(matmul_basic(a, b))
out = {}
for name, kwargs in (("here", {}), ("mesh", {"mesh": "4x2:x,y"})):
    c = nbcompile.compile(matmul_basic, a, b, **kwargs)
    np.testing.assert_allclose(np.asarray(c.fn(a, b)), want)
    out[name] = {
        "runnable": c.runnable,
        "shardings": c.placement.input_shardings,
        "collectives": [k["op"] for k in c.collectives],
    }
try:
    nbcompile.compile(matmul_basic, a, b, backend="tpu", topology="v5e:2x4")
    out["tpu_concrete"] = None
except TargetError as err:
    out["tpu_concrete"] = [err.code, "abstract_mesh" in str(err)]
c = nbcompile.compile(matmul_abstract, a, b, backend="tpu", topology="v5e:2x4")
out["tpu_abstract"] = {
    "mesh": dict(c.target.mesh.shape),
    "shardings": c.placement.input_shardings,
    "collectives": [k["op"] for k in c.collectives],
}
print(json.dumps(out))
