"""The traced program as a graph: one node per jaxpr equation, recursively.

Nested programs (pjit / nested jit, scan, while, cond, custom_jvp / custom_vjp, remat, shard_map)
become groups: their equations are nodes inside the group, the outer operands feed the inner
equations directly and a ``call`` node collects the inner results. Top-level arguments are
``param`` nodes, closed-over constants and literals ``const`` nodes, results ``output`` nodes.

Alongside the graph the walk records, per equation, what the gradient, cost and folding
analyses need (phase, analytic flops and bytes, operands and results), so the jaxpr is walked
once.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

from . import _jax
from .calls import BACKWARD, CallKinds
from .graph import Graph, Node
from .lines import Locator
from .namestack import shown, strip_transforms, transform_names, unrepeated

__all__ = ["EqnInfo", "Traced", "eager_dispatches", "trace_graph", "walk_order"]

_CALL_KINDS = {
    "pjit": "function",
    "jit": "function",
    "closed_call": "function",
    "core_call": "function",
    "scan": "loop",
    "while": "loop",
    "cond": "branch",
    "custom_jvp_call": "custom",
    "custom_vjp_call": "custom",
    "custom_vjp_call_jaxpr": "custom",
    "checkpoint": "remat",
    "remat2": "remat",
    "remat": "remat",
    "shard_map": "shard_map",
}
# Op by op (jax.disable_jit(), what --bench times as eager) these run their one sub-program's
# equations: nested jit, custom-derivative and remat wrappers.
_EAGER_OPENED = {"function", "custom", "remat"}
_MOVEMENT = {
    "reshape",
    "broadcast_in_dim",
    "transpose",
    "squeeze",
    "expand_dims",
    "slice",
    "dynamic_slice",
    "dynamic_update_slice",
    "concatenate",
    "pad",
    "gather",
    "select_n",
    "convert_element_type",
    "copy",
    "copy_p",
    "rev",
    "iota",
    "bitcast_convert_type",
    "stop_gradient",
}
_REDUCE = {
    "reduce_sum",
    "reduce_max",
    "reduce_min",
    "reduce_prod",
    "argmax",
    "argmin",
    "reduce_and",
    "reduce_or",
    "cumsum",
    "cumprod",
    "cummax",
    "reduce_precision",
}


@dataclass(slots=True)
class EqnInfo:
    """One equation: its node, primitive, phase and the vars it reads and writes."""

    node: Node
    primitive: str
    phase: str | None
    depth: int
    invars: list[Any]
    outvars: list[Any]
    is_call: bool = False
    recompute: bool = False
    multiplier: int = 1
    bytes: int = 0
    calls: tuple[str, ...] = ()  # the user's call path (analysis/calls.py), backward marked


@dataclass
class Traced:
    graph: Graph
    eqns: list[EqnInfo] = field(default_factory=list)
    consts: list[tuple[Node, Any, Any]] = field(default_factory=list)  # node, var, value
    eager_kernels: int = 0  # see eager_dispatches
    eager_exact: bool = True  # False: eager_kernels is a lower bound
    const_eqns: list[EqnInfo] | None = None  # computed once by folding


def _short(aval: Any) -> str:
    try:
        return _short_cached(aval)
    except TypeError:  # an unhashable aval
        return _short_text(aval)


@functools.lru_cache(maxsize=4096)
def _short_cached(aval: Any) -> str:
    return _short_text(aval)


def _short_text(aval: Any) -> str:
    try:
        return aval.str_short(short_dtypes=True)
    except (AttributeError, TypeError):
        return str(aval)


def _nbytes(aval: Any) -> int:
    shape = getattr(aval, "shape", None)
    dtype = getattr(aval, "dtype", None)
    if shape is None or dtype is None:
        return 0
    return math.prod(shape) * getattr(dtype, "itemsize", 0)


@functools.lru_cache(maxsize=4096)
def _path_of(name_stack: str) -> tuple[tuple[str, ...], frozenset[str]]:
    """Scopes (transforms stripped, absurdly long names cut: ``namestack.shown``) and the
    transforms named in a name stack string; linear in its length (``analysis/namestack.py``)."""
    scopes = []
    for part in unrepeated(name_stack).split("/"):
        part = strip_transforms(part)
        if part:
            scopes.append(shown(part))
    return tuple(scopes), transform_names(name_stack)


@functools.lru_cache(maxsize=4096)
def _transposed(name_stack: str) -> tuple[bool, ...]:
    """Per scope of :func:`_path_of`: whether it sits under a ``transpose(...)``."""
    flags, backward = [], False
    for part in unrepeated(name_stack).split("/"):
        backward = backward or "transpose(" in part
        if strip_transforms(part):
            flags.append(backward)
    return tuple(flags)


def _phase(transforms: frozenset[str]) -> str | None:
    if "transpose" in transforms:
        return "backward"
    if "jvp" in transforms:
        return "forward"
    return None


def eqn_flops(prim: str, eqn: Any) -> float:
    """nbcompile's analytic flop count for one equation (multiply-add = 2 flops)."""
    outs = [v.aval for v in eqn.outvars]
    out_elems = sum(math.prod(getattr(a, "shape", ())) for a in outs)
    if prim == "dot_general":
        (contract, _), _ = eqn.params["dimension_numbers"]
        lhs = eqn.invars[0].aval.shape
        return 2.0 * out_elems * math.prod(lhs[d] for d in contract)
    if prim == "conv_general_dilated":
        rhs = eqn.invars[1].aval.shape
        out_feature_dim = eqn.params["dimension_numbers"].rhs_spec[0]
        return 2.0 * out_elems * math.prod(rhs) / max(rhs[out_feature_dim], 1)
    if prim in _MOVEMENT or prim in _CALL_KINDS:
        return 0.0
    if prim in _REDUCE or prim.startswith("reduce"):
        return float(sum(math.prod(getattr(v.aval, "shape", ())) for v in eqn.invars))
    return float(out_elems)


def _subprograms(eqn: Any) -> list[tuple[str, Any, list[Any] | None]]:
    """(label, jaxpr, outer atoms bound to its invars or None) for each nested program."""
    prim, params, outer = eqn.primitive.name, eqn.params, list(eqn.invars)
    found: list[tuple[str, Any]] = []
    for key, value in params.items():
        for i, sub in enumerate(value if isinstance(value, tuple | list) else (value,)):
            if isinstance(sub, _jax.ClosedJaxpr | _jax.Jaxpr):
                label = f"{key}[{i}]" if isinstance(value, tuple | list) else key
                found.append((label, sub))
    out = []
    for label, sub in found:
        inner = sub.jaxpr if isinstance(sub, _jax.ClosedJaxpr) else sub
        n = len(inner.invars)
        if prim == "while":
            cn, bn = params.get("cond_nconsts", 0), params.get("body_nconsts", 0)
            carry = outer[cn + bn :]
            bind = outer[:cn] + carry if label == "cond_jaxpr" else outer[cn : cn + bn] + carry
        elif prim == "cond":
            bind = outer[1:]
        else:
            bind = outer if n == len(outer) else (outer[-n:] if n < len(outer) else None)
        out.append((label, sub, bind if bind is not None and len(bind) == n else None))
    return out


class _Walker:
    def __init__(self, source: Locator, grad: bool, kinds: CallKinds | None = None) -> None:
        self.source = source
        self.grad = grad
        self.kinds = kinds or CallKinds()
        self.library_groups: set[str] = set()  # groups of library calls: no private jit box
        self.traced = Traced(Graph())
        self.producer: dict[Any, EqnInfo] = {}

    def atom_node(self, atom: Any, env: dict[Any, str], group: str | None, path: str) -> str | None:
        if _jax.is_literal(atom):
            value = getattr(atom, "val", "?")
            label = str(value) if getattr(value, "ndim", 0) == 0 else "literal"
            node = self.traced.graph.add_node(
                "literal",
                "const",
                label=label,
                group=group,
                shape=_short(atom.aval),
                path=path,
                bytes=_nbytes(atom.aval),
            )
            return node.id
        return env.get(atom)

    def bind_consts(self, closed: Any, env: dict[Any, str], group: str | None, path: str) -> None:
        for var, value in zip(closed.jaxpr.constvars, closed.consts, strict=False):
            node = self.traced.graph.add_node(
                "constant",
                "const",
                label="constant",
                group=group,
                shape=_short(var.aval),
                bytes=_nbytes(var.aval),
                path=path,
            )
            env[var] = node.id
            self.traced.consts.append((node, var, value))

    def walk(
        self,
        jaxpr: Any,
        env: dict[Any, str],
        group: str | None,
        path: list[str],
        phase: str | None,
        depth: int,
        mult: int,
        remat: bool,
        calls: tuple[str, ...] = (),
    ) -> None:
        graph = self.traced.graph
        for eqn in jaxpr.eqns:
            prim = eqn.primitive.name
            si = eqn.source_info
            stack = str(si.name_stack)
            scopes, transforms = _path_of(stack)
            eqn_phase = _phase(transforms) or phase
            if self.grad and eqn_phase is None:
                eqn_phase = "forward"
                for v in eqn.invars:
                    info = self.producer.get(v) if not _jax.is_literal(v) else None
                    if info is not None and info.phase == "backward":
                        eqn_phase = "backward"
                        break
            g, modules, eqn_calls = group, scopes, calls
            if self.kinds and any(s in self.kinds for s in scopes):
                g, modules, eqn_calls = self.call_groups(group, stack, scopes, calls)
            else:
                for scope, backward in zip(scopes, self.backward_flags(stack, scopes), strict=True):
                    g = graph.group(g, scope + BACKWARD if backward else scope, "scope")
            node_path = "/".join([*path, *modules])
            location, visible = self.source.of_traceback(si.traceback)
            subs = _subprograms(eqn)
            kind = _CALL_KINDS.get(prim, "function") if subs else None
            out_shape = ", ".join(_short(v.aval) for v in eqn.outvars)
            out_bytes = sum(_nbytes(v.aval) for v in eqn.outvars)
            node = graph.add_node(
                prim,
                "call" if subs else "op",
                group=g,
                shape=out_shape,
                bytes=out_bytes,
                path=node_path,
                line=visible,
                location=location,
                file=location.file if location else None,
                file_line=location.line if location else None,
                phase=eqn_phase if self.grad else None,
                flops=None if subs else eqn_flops(prim, eqn) * mult,
            )
            if eqn_calls:
                node.extra["calls"] = "/".join(eqn_calls)
            graph.eqn_nodes[id(eqn)] = node.id
            if subs and kind == "function" and eqn.params.get("name"):
                node.label = f"{prim}:{eqn.params['name']}"
            in_bytes = sum(_nbytes(v.aval) for v in eqn.invars)
            info = EqnInfo(
                node,
                prim,
                eqn_phase,
                depth,
                list(eqn.invars),
                list(eqn.outvars),
                is_call=bool(subs),
                recompute=remat,
                multiplier=mult,
                bytes=(in_bytes + out_bytes) * mult,
                calls=eqn_calls,
            )
            self.traced.eqns.append(info)
            for sub_label, sub, bind in subs:
                label = eqn.params.get("name") if kind == "function" else f"{prim} {sub_label}"
                if kind == "function" and g in self.library_groups:
                    sg = g  # jax.numpy's own jit (``_var``) is the library call the user made
                else:
                    sg = graph.group(g, str(label or prim), kind or "function", unique=True)
                if kind == "loop" and sub_label in ("jaxpr", "body_jaxpr"):
                    node.extra["loop_body"] = sg  # analysis/loops.py: the loop's body group
                inner = sub.jaxpr if isinstance(sub, _jax.ClosedJaxpr) else sub
                inner_env: dict[Any, str] = {}
                if isinstance(sub, _jax.ClosedJaxpr):
                    self.bind_consts(sub, inner_env, sg, node_path)
                for k, var in enumerate(inner.invars):
                    src = self.atom_node(bind[k], env, sg, node_path) if bind else None
                    if src is None:
                        src = graph.add_node(
                            "parameter",
                            "param",
                            group=sg,
                            path=node_path,
                            shape=_short(var.aval),
                            bytes=_nbytes(var.aval),
                        ).id
                    inner_env[var] = src
                sub_mult = mult * int(eqn.params.get("length", 1)) if prim == "scan" else mult
                self.walk(
                    inner,
                    inner_env,
                    sg,
                    [*path, *modules, str(label or prim)],
                    eqn_phase,
                    depth + 1,
                    sub_mult,
                    remat or kind == "remat" or "rematted_computation" in scopes,
                    eqn_calls,
                )
                for var in inner.outvars:
                    src = self.atom_node(var, inner_env, sg, node_path)
                    if src is not None:
                        graph.add_edge(src, node.id, _nbytes(var.aval), _short(var.aval))
            if not subs:
                for var in eqn.invars:
                    src = self.atom_node(var, env, g, node_path)
                    if src is not None:
                        graph.add_edge(src, node.id, _nbytes(var.aval), _short(var.aval))
            for var in eqn.outvars:
                if not _jax.is_dropvar(var):
                    env[var] = node.id
                    self.producer[var] = info

    def backward_flags(self, stack: str, scopes: tuple[str, ...]) -> tuple[bool, ...]:
        """Per scope: whether its group is the ``(backward)`` one (with ``--grad``, under a
        ``transpose``): module scopes pair with their forward groups like calls do."""
        flags = _transposed(stack) if self.grad else ()
        return tuple(k < len(flags) and flags[k] for k in range(len(scopes)))

    def call_groups(
        self, group: str | None, stack: str, scopes: tuple[str, ...], calls: tuple[str, ...]
    ) -> tuple[str | None, tuple[str, ...], tuple[str, ...]]:
        """Groups for scopes that mix module scopes and the user's calls: (innermost group,
        module scopes, call path). Calls under a ``transpose`` are their ``(backward)`` group."""
        graph, g = self.traced.graph, group
        modules, path = [], list(calls)
        for scope, backward in zip(scopes, _transposed(stack), strict=False):
            kind = self.kinds.get(scope)
            if kind is None:  # a module scope: under a transpose, its (backward) group
                modules.append(scope)
                g = graph.group(g, scope + BACKWARD if backward and self.grad else scope, "scope")
                continue
            label = scope + BACKWARD if backward and self.grad else scope
            path.append(label)
            g = graph.group(g, label, "function", call=kind)
            if kind == "library":
                self.library_groups.add(g)
        return g, tuple(modules), tuple(path)


def trace_graph(
    closed_jaxpr: Any,
    source: Locator,
    name: str = "f",
    grad: bool = False,
    calls: CallKinds | None = None,
) -> Traced:
    """Walk ``closed_jaxpr`` once: the traced Graph plus per-equation records. ``calls``: the
    labels of the user's calls in the name stacks (they become ``function`` groups, not part of
    module paths; see ``analysis/calls.py``)."""
    walker = _Walker(source, grad, calls)
    graph = walker.traced.graph
    jaxpr = closed_jaxpr.jaxpr
    env: dict[Any, str] = {}
    names = _jax.arg_names(jaxpr) or []
    for k, var in enumerate(jaxpr.invars):
        label = names[k] if k < len(names) and names[k] else f"arg{k}"
        env[var] = graph.add_node(
            "parameter",
            "param",
            label=label,
            shape=_short(var.aval),
            bytes=_nbytes(var.aval),
            path=name,
        ).id
    walker.bind_consts(closed_jaxpr, env, None, name)
    walker.walk(jaxpr, env, None, [name], None, 0, 1, False)
    walker.traced.eager_kernels, walker.traced.eager_exact = eager_dispatches(jaxpr)
    for k, var in enumerate(jaxpr.outvars):
        src = walker.atom_node(var, env, None, name)
        out = graph.add_node(
            "output",
            "output",
            label=f"out{k}",
            shape=_short(var.aval),
            bytes=_nbytes(var.aval),
            path=name,
        )
        if src is not None:
            graph.add_edge(src, out.id, _nbytes(var.aval), _short(var.aval))
    return walker.traced


def eager_dispatches(jaxpr: Any) -> tuple[int, bool]:
    """``(count, exact)``: the primitives op-by-op execution dispatches (``jax.disable_jit()``,
    what ``--bench`` times as eager and counts by replaying the program): nested jit, custom-
    derivative and remat wrappers run their equations, a ``scan`` body runs once per iteration,
    a ``cond`` one branch. ``exact`` is False where only a lower bound is known before running:
    a ``while`` (its iterations: counted as zero, the condition once), a ``cond`` whose branches
    differ (the smallest counted), a primitive run whole whose own dispatches are unknown
    (``shard_map``: its body runs per device)."""
    memo: dict[int, tuple[int, bool]] = {}

    def count(jx: Any) -> tuple[int, bool]:
        inner = jx.jaxpr if isinstance(jx, _jax.ClosedJaxpr) else jx
        if id(inner) in memo:
            return memo[id(inner)]
        total, exact = 0, True
        for eqn in inner.eqns:
            prim, params = eqn.primitive.name, eqn.params
            subs = [sub for _label, sub, _bind in _subprograms(eqn)]
            if not subs:
                total += 1
            elif prim == "scan":
                n, e = count(params["jaxpr"])
                total, exact = total + n * int(params["length"]), exact and e
            elif prim == "while":
                total, exact = total + count(params["cond_jaxpr"])[0], False
            elif prim == "cond":
                branches = [count(b) for b in params["branches"]]
                total += min(n for n, _e in branches)
                exact = (
                    exact and len({n for n, _e in branches}) == 1 and all(e for _n, e in branches)
                )
            elif _CALL_KINDS.get(prim) in _EAGER_OPENED and len(subs) == 1:
                n, e = count(subs[0])
                total, exact = total + n, exact and e
            else:
                total, exact = total + 1, False
        memo[id(inner)] = (total, exact)
        return total, exact

    return count(jaxpr)


def walk_order(closed_jaxpr: Any) -> list[Any]:
    """Every equation in the order :func:`trace_graph` makes their nodes (an equation, then the
    equations of its nested programs): the k-th equation here is the k-th ``EqnInfo``."""
    out: list[Any] = []
    todo = [iter(closed_jaxpr.jaxpr.eqns)]
    while todo:
        eqn = next(todo[-1], None)
        if eqn is None:
            todo.pop()
            continue
        out.append(eqn)
        subs = _subprograms(eqn)
        for _label, sub, _bind in reversed(subs):
            todo.append(iter((sub.jaxpr if isinstance(sub, _jax.ClosedJaxpr) else sub).eqns))
    return out
