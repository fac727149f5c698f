"""An op-by-op jaxpr interpreter that descends into nested jaxprs.

Every primitive that is not a container is evaluated with ``eqn.primitive.bind(*invals,
**eqn.params)`` on concrete arrays, which dispatches it as its own kernel, exactly as JAX does
under ``jax.disable_jit()``. Containers are opened: ``scan`` and ``while`` loop in Python,
``cond`` evaluates the chosen branch, call-like primitives (``jit``, ``closed_call``, ``remat``,
``custom_jvp_call``, ``custom_vjp_call``) run their jaxpr inline. A primitive with sub-jaxprs this
interpreter does not know (``shard_map``: its body runs per device, with collectives) is bound
whole and reported in :attr:`Interpreter.opaque`.

:attr:`Interpreter.open` holds the equations being run, outermost first (the hook of a nested
equation finds the ``cond``/``scan``/``checkpoint`` that holds it there).

A hook sees every equation after it ran (containers too, after their body):
``hook(node_id, eqn, invals, outvals, iteration, leaf)``. ``iteration`` is a tuple with one loop
index per enclosing ``scan``/``while``. Values are dropped as soon as their last user ran, so
memory stays at what the program itself needs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.extend.core as jcore
import jax.numpy as jnp

from ..analysis._jax import scan_layout
from .ids import CALL_PRIMITIVES, open_jaxpr, subjaxprs

__all__ = ["Hook", "Interpreter"]

Hook = Callable[[str, Any, list[Any], list[Any], tuple[int, ...], bool], None]


def _last_uses(jaxpr: Any) -> dict[int, list[Any]]:
    """eqn index -> vars whose last reader is that equation (outputs are never freed)."""
    keep = {id(v) for v in jaxpr.outvars if isinstance(v, jcore.Var)}
    last: dict[int, tuple[int, Any]] = {}
    for i, eqn in enumerate(jaxpr.eqns):
        for v in eqn.invars:
            if isinstance(v, jcore.Var) and id(v) not in keep:
                last[id(v)] = (i, v)
    by_eqn: dict[int, list[Any]] = {}
    for i, v in last.values():
        by_eqn.setdefault(i, []).append(v)
    return by_eqn


class Interpreter:
    """Runs a jaxpr op by op, calling ``hook`` after each equation."""

    def __init__(self, hook: Hook | None = None) -> None:
        self.hook = hook
        self.opaque: dict[str, str] = {}  # node id -> primitive bound whole (not descended)
        self.open: list[Any] = []  # the container equations being run, outermost first

    def run(self, closed_jaxpr: Any, args: Sequence[Any]) -> list[Any]:
        """Evaluate ``closed_jaxpr`` on flat ``args``; returns the flat outputs."""
        return self.eval_jaxpr(closed_jaxpr, list(args), "", ())

    def eval_jaxpr(
        self, jaxpr: Any, args: list[Any], prefix: str, iteration: tuple[int, ...]
    ) -> list[Any]:
        inner, consts = open_jaxpr(jaxpr)
        env: dict[Any, Any] = {}
        for var, value in zip(inner.constvars, consts, strict=True):
            env[var] = value
        for var, value in zip(inner.invars, args, strict=True):
            env[var] = value

        def read(v: Any) -> Any:
            return v.val if isinstance(v, jcore.Literal) else env[v]

        frees = _last_uses(inner)
        for i, eqn in enumerate(inner.eqns):
            node_id = f"{prefix}e{i}"
            invals = [read(v) for v in eqn.invars]
            self.open.append(eqn)
            try:
                outvals, leaf = self._eval_eqn(eqn, invals, node_id, iteration)
            finally:
                self.open.pop()
            for var, value in zip(eqn.outvars, outvals, strict=True):
                if not isinstance(var, jcore.DropVar):
                    env[var] = value
            if self.hook is not None:
                self.hook(node_id, eqn, invals, outvals, iteration, leaf)
            for var in frees.get(i, ()):
                env.pop(var, None)
        return [read(v) for v in inner.outvars]

    def _eval_eqn(
        self, eqn: Any, invals: list[Any], node_id: str, iteration: tuple[int, ...]
    ) -> tuple[list[Any], bool]:
        name = eqn.primitive.name
        if name == "scan":
            return self._scan(eqn, invals, node_id, iteration), False
        if name == "while":
            return self._while(eqn, invals, node_id, iteration), False
        if name == "cond":
            branches = eqn.params["branches"]
            index = min(max(int(invals[0]), 0), len(branches) - 1)
            sub = f"{node_id}/branch{index}/"
            return self.eval_jaxpr(branches[index], invals[1:], sub, iteration), False
        subs = subjaxprs(eqn)
        if name in CALL_PRIMITIVES and len(subs) == 1:
            return self.eval_jaxpr(subs[0][1], invals, f"{node_id}/call/", iteration), False
        if subs:
            self.opaque[node_id] = name
        # A primitive carrying a sub-program (shard_map, ...) is bound with the callable JAX
        # derives from its parameters, as jax.core.eval_jaxpr does: binding the jaxpr parameter
        # itself raises KeyError('subfuns'). JAX 0.10: get_bind_params returns the parameters
        # with "subfuns" inside (before 0.4.36 it returned (subfuns, params)).
        params = eqn.primitive.get_bind_params(eqn.params)
        with eqn.ctx.manager:
            out = eqn.primitive.bind(*invals, **params)
        return (list(out) if eqn.primitive.multiple_results else [out]), True

    def _scan(
        self, eqn: Any, invals: list[Any], node_id: str, iteration: tuple[int, ...]
    ) -> list[Any]:
        p = eqn.params
        (n_consts, n_carry), length = scan_layout(p), p["length"]
        consts, carry = invals[:n_consts], invals[n_consts : n_consts + n_carry]
        xs = invals[n_consts + n_carry :]
        ys: list[list[Any] | None] = [None] * length
        order = range(length - 1, -1, -1) if p["reverse"] else range(length)
        for i in order:
            out = self.eval_jaxpr(
                p["jaxpr"],
                [*consts, *carry, *(x[i] for x in xs)],
                f"{node_id}/body/",
                (*iteration, i),
            )
            carry, ys[i] = out[:n_carry], out[n_carry:]
        y_avals = [v.aval for v in eqn.outvars[n_carry:]]
        if length == 0:
            stacked = [jnp.zeros(a.shape, a.dtype) for a in y_avals]
        else:
            stacked = [jnp.stack([y[k] for y in ys if y is not None]) for k in range(len(y_avals))]
        return [*carry, *stacked]

    def _while(
        self, eqn: Any, invals: list[Any], node_id: str, iteration: tuple[int, ...]
    ) -> list[Any]:
        p = eqn.params
        n_cond, n_body = p["cond_nconsts"], p["body_nconsts"]
        cond_consts, body_consts = invals[:n_cond], invals[n_cond : n_cond + n_body]
        carry = invals[n_cond + n_body :]
        step = 0
        while True:
            where = (*iteration, step)
            (pred,) = self.eval_jaxpr(
                p["cond_jaxpr"], [*cond_consts, *carry], f"{node_id}/cond/", where
            )
            if not bool(jax.device_get(pred)):
                return carry
            carry = self.eval_jaxpr(
                p["body_jaxpr"], [*body_consts, *carry], f"{node_id}/body/", where
            )
            step += 1
