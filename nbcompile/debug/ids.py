"""Deterministic ids for the equations of a jaxpr, nested ones included.

The id of an equation is its *path*: ``e12`` is equation 12 of the top-level jaxpr;
``e12/body/e3`` is equation 3 of the ``body`` sub-jaxpr of that equation. Sub-jaxpr names:

=========================================================  =====================================
primitive                                                   sub-jaxpr names
=========================================================  =====================================
``scan``                                                    ``body``
``while``                                                   ``cond``, ``body``
``cond``                                                    ``branch0``, ``branch1``, ...
``jit``/``pjit``, ``closed_call``, ``core_call``,           ``call``
``remat2``/``checkpoint``, ``custom_jvp_call``,
``custom_vjp_call``
any other primitive carrying jaxprs in its params           the param name (``name0``, ``name1``
                                                            for tuples)
=========================================================  =====================================

Ids do not depend on loop iterations: an equation inside a scan body has one id, and per-iteration
results carry an ``iteration`` index beside it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jax.extend.core as jcore

__all__ = ["CALL_PRIMITIVES", "equation_ids", "subjaxprs"]

#: Primitives whose single sub-jaxpr is run once with the equation's inputs.
CALL_PRIMITIVES: dict[str, str] = {
    "jit": "jaxpr",
    "pjit": "jaxpr",
    "closed_call": "call_jaxpr",
    "core_call": "call_jaxpr",
    "remat2": "jaxpr",
    "checkpoint": "jaxpr",
    "custom_jvp_call": "call_jaxpr",
    "custom_vjp_call": "call_jaxpr",
}


def _is_jaxpr(value: Any) -> bool:
    return isinstance(value, jcore.Jaxpr | jcore.ClosedJaxpr)


def subjaxprs(eqn: Any) -> list[tuple[str, Any]]:
    """``(name, Jaxpr | ClosedJaxpr)`` for each sub-jaxpr of ``eqn``, named as in the table."""
    name = eqn.primitive.name
    params = eqn.params
    if name == "scan":
        return [("body", params["jaxpr"])]
    if name == "while":
        return [("cond", params["cond_jaxpr"]), ("body", params["body_jaxpr"])]
    if name == "cond":
        return [(f"branch{i}", b) for i, b in enumerate(params["branches"])]
    if name in CALL_PRIMITIVES and _is_jaxpr(params.get(CALL_PRIMITIVES[name])):
        return [("call", params[CALL_PRIMITIVES[name]])]
    found: list[tuple[str, Any]] = []
    for key in sorted(params):
        value = params[key]
        if _is_jaxpr(value):
            found.append((key, value))
        elif isinstance(value, tuple | list):
            found.extend((f"{key}{i}", v) for i, v in enumerate(value) if _is_jaxpr(v))
    return found


def open_jaxpr(jaxpr: Any) -> tuple[Any, list[Any]]:
    """``(Jaxpr, consts)`` of a Jaxpr or ClosedJaxpr."""
    if isinstance(jaxpr, jcore.ClosedJaxpr):
        return jaxpr.jaxpr, list(jaxpr.consts)
    return jaxpr, []


def _walk(jaxpr: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    inner, _ = open_jaxpr(jaxpr)
    for i, eqn in enumerate(inner.eqns):
        node_id = f"{prefix}e{i}"
        yield node_id, eqn
        for sub_name, sub in subjaxprs(eqn):
            yield from _walk(sub, f"{node_id}/{sub_name}/")


def equation_ids(closed_jaxpr: Any) -> list[tuple[str, Any]]:
    """Every equation of ``closed_jaxpr`` (nested ones after their parent) with its path id."""
    return list(_walk(closed_jaxpr, ""))
