"""Limits the user's program is checked against before JAX traces it or XLA compiles it.

Past these, JAX or XLA do not raise: they crash the kernel (measured on jax/jaxlib 0.10.2;
plain ``jax.jit`` crashes the same way). Each refusal is an NbcompileError with its own code:

- ``MAX_TREE_DEPTH`` levels of nesting in the example arguments (lists, tuples, dicts, any
  pytree node; NBC217): JAX's C++ pytree code raises ``SystemError`` on a 2,000-deep list
  (900 worked), and deeper ones can overflow its stack.
- ``MAX_ARRAY_BYTES`` for any array of the traced program, argument or intermediate (NBC215):
  XLA aborts the process (``overflow in static extent product``) on an array whose size
  overflows 64 bits, e.g. ``jax.ShapeDtypeStruct((2**62,), jnp.float32)``.
- ``MAX_CHAIN`` dependent operations (NBC216): XLA:CPU overflows its stack in its fusion
  analysis on a 25,000-op element-wise chain (a 20,000-op chain compiles); 16,000 leaves a
  margin without refusing what plain ``jax.jit`` compiles reliably.

The same array-size and chain limits hold for frozen files (``nbcompile/frozen/_program.py``).
"""

from __future__ import annotations

from typing import Any

import jax
from jax.extend import core as jex_core

from ..errors import CompileError, TraceError

MAX_TREE_DEPTH = 256
MAX_ARRAY_BYTES = 2**48
MAX_CHAIN = 16_000


def check_arguments(
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    names: list[str],
    static: Any = (),
    static_names: Any = (),
) -> None:
    """Refuse (NBC217) example arguments nested deeper than ``MAX_TREE_DEPTH`` (static ones,
    which JAX hashes instead of flattening, are not walked).

    Walked one level at a time (no recursion here, none in JAX's C++ code): each node is
    flattened with its children as leaves.
    """
    roots = [
        (f"argument {names[i]!r}" if i < len(names) else f"argument {i}", a)
        for i, a in enumerate(args)
        if i not in static
    ]
    roots += [(f"argument {k!r}", v) for k, v in kwargs.items() if k not in static_names]
    for label, root in roots:
        level, depth = [root], 0
        while level:
            depth += 1
            if depth > MAX_TREE_DEPTH:
                raise TraceError(
                    f"{label} nests lists, tuples, dicts or other containers more than "
                    f"{MAX_TREE_DEPTH} levels deep: JAX's pytree code fails on such nesting",
                    code="NBC217",
                    hint="pass a flatter structure (stack the arrays, or a dict of arrays)",
                )
            below = []
            for node in level:
                children, treedef = jax.tree_util.tree_flatten(
                    node, is_leaf=lambda child, node=node: child is not node
                )
                if treedef.num_nodes > 1:  # a container: its children are the next level
                    below.extend(children)
            level = below


def check_program(jaxpr: Any) -> None:
    """Refuse a traced program with an array over ``MAX_ARRAY_BYTES`` (NBC215) or a chain of
    more than ``MAX_CHAIN`` dependent operations (NBC216), before it is lowered."""
    _Walk().chain(jaxpr)


class _Walk:
    """Array sizes and longest dependency chain of a jaxpr and the jaxprs inside it (one pass;
    a few microseconds per equation)."""

    def __init__(self) -> None:
        self.chains: dict[int, int] = {}
        self.checked: set[Any] = set()  # avals whose size was checked

    def chain(self, jaxpr: Any) -> int:
        jaxpr = getattr(jaxpr, "jaxpr", jaxpr)  # a ClosedJaxpr
        known = self.chains.get(id(jaxpr))
        if known is not None:
            return known
        for var in jaxpr.invars:
            self._size(var.aval, "an argument")
        depth: dict[Any, int] = {}
        get, literal, longest = depth.get, jex_core.Literal, 0
        for eqn in jaxpr.eqns:
            weight = 1
            if eqn.params:
                for inner in jex_core.jaxprs_in_params(eqn.params):
                    weight = max(weight, 1 + self.chain(inner))
            start = 0
            for var in eqn.invars:
                if type(var) is not literal:
                    d = get(var, 0)
                    if d > start:
                        start = d
            end = start + weight
            for var in eqn.outvars:
                self._size(var.aval, eqn.primitive.name)
                depth[var] = end
            if end > longest:
                longest = end
                if longest > MAX_CHAIN:
                    raise CompileError(
                        f"the program has a chain of more than {MAX_CHAIN} dependent "
                        "operations: XLA's compiler overflows its stack on such chains and "
                        "ends the kernel",
                        code="NBC216",
                        hint="use jax.lax.scan or jax.lax.fori_loop for a long sequence of "
                        "steps instead of unrolling it in Python",
                    )
        self.chains[id(jaxpr)] = longest
        return longest

    def _size(self, aval: Any, what: str) -> None:
        try:
            if aval in self.checked:
                return
            self.checked.add(aval)
        except TypeError:  # an unhashable abstract value: check it every time
            pass
        _check_size(aval, what if what == "an argument" else f"the result of {what}")


def _check_size(aval: Any, what: str) -> None:
    shape = getattr(aval, "shape", None)
    if not shape:
        return
    size = getattr(getattr(aval, "dtype", None), "itemsize", None) or 8
    for dim in shape:
        if not isinstance(dim, int):
            return
        size *= dim
    if size > MAX_ARRAY_BYTES:
        raise CompileError(
            f"{what} is a {aval.str_short()} array of {size} bytes, above the limit of "
            f"{MAX_ARRAY_BYTES} bytes for one array: XLA cannot represent it and would end "
            "the kernel",
            code="NBC215",
            hint="use smaller shapes (a jax.ShapeDtypeStruct with a smaller size)",
        )
