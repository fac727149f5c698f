"""Issue 28 item 10: a ``shard_map`` program on inputs the user already placed with
``NamedSharding`` compiles under ``--mesh`` with ``--shard`` specs that repeat that placement
(they used to be re-placed on nbcompile's own mesh and refused by shard_map's ``in_specs``
check), and a ``--shard`` spec that conflicts says so in one line.

The model re-implements ``matmul_basic`` from JAX's shard_map guide (docs/notebooks/
shard_map.md, credit to the JAX authors): a block matmul whose partial sums are ``psum``-ed
over ``y``. It runs in an IPython shell in a child process with 8 virtual CPU devices (the
device count is fixed when JAX starts), with the cells as a user would write them.
"""

from __future__ import annotations

import pytest

from ..helpers import EIGHT_CPU_DEVICES, child_json

CHILD = r'''
import json

import numpy as np
from IPython.testing.globalipapp import start_ipython

import nbcompile

ip = start_ipython()
ip.run_line_magic("load_ext", "nbcompile")
setup = ip.run_cell("""
from functools import partial
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

mesh = jax.make_mesh((4, 2), ("x", "y"))
a = jax.device_put(jnp.arange(8 * 16.0).reshape(8, 16), NamedSharding(mesh, P("x", "y")))
b = jax.device_put(jnp.arange(16 * 4.0).reshape(16, 4), NamedSharding(mesh, P("y", None)))

@jax.jit
@partial(jax.shard_map, mesh=mesh, in_specs=(P("x", "y"), P("y", None)),
         out_specs=P("x", None))
def matmul_basic(a_block, b_block):
    c_partialsum = jnp.dot(a_block, b_block)
    c_block = jax.lax.psum(c_partialsum, "y")
    return c_block
""")
assert setup.success, setup.error_in_exec
out = {}
for name, shard in (
    ("same", "--shard a_block=x,y b_block=y,None"),
    ("one", "--shard a_block=x,y"),
    ("conflict", "--shard a_block=y,x"),
):
    res = ip.run_cell(f"%%compile --quiet --mesh 4x2:x,y {shard}\nmatmul_basic(a, b)\n")
    err = res.error_in_exec
    if err is None:
        c = nbcompile.last()
        got = np.asarray(c.fn(ip.user_ns["a"], ip.user_ns["b"]))
        want = np.asarray(ip.user_ns["matmul_basic"](ip.user_ns["a"], ip.user_ns["b"]))
        out[name] = {
            "ok": True,
            "same_values": bool(np.allclose(got, want)),
            "shardings": c.placement.input_shardings,
            "collectives": [k["op"] for k in c.collectives],
            "a_untouched": not ip.user_ns["a"].is_deleted(),
        }
    else:
        out[name] = {"ok": False, "code": getattr(err, "code", None), "text": str(err)}
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def result() -> dict:
    return child_json(["-c", CHILD], env=EIGHT_CPU_DEVICES, timeout=300)


def test_shard_specs_repeating_the_users_placement_compile(result):
    for name in ("same", "one"):
        got = result[name]
        assert got["ok"], got
        assert got["same_values"] and got["a_untouched"]
        assert got["shardings"] == {"a_block": "x,y", "b_block": "y,None"}
        assert "all-reduce" in got["collectives"]


def test_a_conflicting_shard_spec_says_what_conflicts_in_one_line(result):
    got = result["conflict"]
    assert not got["ok"]
    first = got["text"].splitlines()[0]
    # shard_map's in_specs against the --shard placement, both named (not P(None, None))
    assert "P('x', 'y')" in first and "P('y', 'x')" in first, first
    assert "P(None, None)" not in got["text"]
