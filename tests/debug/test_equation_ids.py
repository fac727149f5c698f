"""equation_ids(): deterministic path ids for nested jaxprs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from nbcompile.debug import equation_ids


def nested(x):
    inner = jax.jit(lambda v: v * 2.0)
    y = lax.scan(lambda c, v: (c + inner(v), None), jnp.zeros(3), x)[0]
    y = lax.while_loop(lambda v: v.sum() < 10.0, lambda v: v + 1.0, y)
    y = lax.cond(y.sum() > 0, jnp.sin, jnp.cos, y)
    return jax.nn.relu(y)


def test_ids_are_paths_and_deterministic():
    x = jnp.ones((4, 3), jnp.float32)
    ids = [nid for nid, _ in equation_ids(jax.make_jaxpr(nested)(x))]
    assert ids == [nid for nid, _ in equation_ids(jax.make_jaxpr(nested)(x))]
    assert len(ids) == len(set(ids))
    prims = dict((nid, eqn.primitive.name) for nid, eqn in equation_ids(jax.make_jaxpr(nested)(x)))
    assert any(p == "scan" and "/" not in nid for nid, p in prims.items())
    scan_id = next(nid for nid, p in prims.items() if p == "scan")
    assert f"{scan_id}/body/e0" in prims
    # the nested jit inside the scan body is one more level
    assert any(nid.startswith(f"{scan_id}/body/") and "/call/" in nid for nid in ids)
    while_id = next(nid for nid, p in prims.items() if p == "while")
    assert f"{while_id}/cond/e0" in prims and f"{while_id}/body/e0" in prims
    cond_id = next(nid for nid, p in prims.items() if p == "cond")
    assert prims[f"{cond_id}/branch0/e0"] == "cos" and prims[f"{cond_id}/branch1/e0"] == "sin"
    # relu is a custom_jvp: its body is reachable
    relu_id = next(nid for nid, p in prims.items() if p == "custom_jvp_call")
    assert f"{relu_id}/call/e0" in prims
    # a parent comes before its children
    for i, nid in enumerate(ids):
        parent = nid.rsplit("/", 2)[0] if "/" in nid else None
        assert parent is None or parent in ids[:i]
