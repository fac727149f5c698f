"""How every measurement calls the compiled program: the call form the compile used.

One :class:`CallForm` per run says

* which arguments are **static** (``--static``: fixed in the program, so never passed to a
  ``jax.stages.Compiled``, never flattened into the program's inputs; an eager call and the
  ``jax.jit`` object still take them, as the user's own call does);
* which array leaves the program **donates** (``--donate``, read from ``Lowered.args_info``): a
  call consumes those buffers, so every measuring call gets fresh copies of them (same sharding)
  and the user's arrays are never deleted. The rebound function itself still donates: that is
  what the user asked for; only measurements must leave the user's data alone.

Bench, ablation, profile, debug and freeze all call through here, so none of them can call the
program in a form the compile did not use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax

from ..errors import TargetError

__all__ = ["CallForm", "fresh_copy"]


def fresh_copy(x: Any) -> Any:
    """A new buffer holding ``x``'s value with ``x``'s sharding (``x`` itself is untouched);
    anything that is not a ``jax.Array`` is returned as it is (a call never consumes it)."""
    if not isinstance(x, jax.Array):
        return x
    return jax.device_put(x, x.sharding, may_alias=False)


def _copies(values: list[Any], names: list[str]) -> list[Any]:
    """Fresh copies of ``values`` (ready to use); ``NBC211`` when the device has no room."""
    try:
        return jax.block_until_ready([fresh_copy(x) for x in values])
    except jax.errors.JaxRuntimeError as err:
        if "RESOURCE_EXHAUSTED" not in str(err):
            raise
        raise TargetError(
            f"no device memory for copies of {', '.join(names) or 'the donated arguments'}: "
            "the program donates them, so it is measured on copies, never on your arrays "
            "(they are untouched)",
            code="NBC211",
            hint="measure without --donate (the same program but for buffer reuse), or with "
            "smaller example arguments",
        ) from err


def _donated_flags(lowered: Any) -> list[bool] | None:
    """Per input leaf of ``lowered``'s program: whether a call donates it (None: unknown)."""
    info = getattr(lowered, "args_info", None)
    if info is None:
        return None
    leaves = jax.tree.leaves(info, is_leaf=lambda x: hasattr(x, "donated"))
    return [bool(getattr(leaf, "donated", False)) for leaf in leaves]


@dataclass(frozen=True)
class CallForm:
    """The example call as the compile made it (see the module docstring).

    ``args`` / ``kwargs``: the full call, static values included; ``static_argnums`` /
    ``static_argnames``: which of them are static; ``donated``: per dynamic leaf (in the order
    ``jax.tree.leaves(self.dynamic())`` gives), whether the program consumes it; ``names``: the
    user's argument names, for notes.
    """

    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    static_argnums: frozenset[int] = frozenset()
    static_argnames: frozenset[str] = frozenset()
    donated: tuple[bool, ...] = ()
    names: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        args: Sequence[Any],
        kwargs: dict[str, Any] | None = None,
        *,
        static_argnums: Iterable[int] = (),
        static_argnames: Iterable[str] = (),
        lowered: Any = None,
        names: Sequence[str] = (),
    ) -> CallForm:
        """The call form of ``args``/``kwargs`` with those static arguments, donating what
        ``lowered`` (the program's ``jax.stages.Lowered``) donates."""
        n = len(args)
        form = cls(
            args=tuple(args),
            kwargs=dict(kwargs or {}),
            static_argnums=frozenset(i % n for i in static_argnums if -n <= i < n),
            static_argnames=frozenset(static_argnames),
            names=tuple(names),
        )
        flags = _donated_flags(lowered) if lowered is not None else None
        if not flags or not any(flags):
            return form
        leaves = form.leaves()
        if len(flags) != len(leaves):  # cannot match them up: copy every array, to be safe
            flags = [isinstance(x, jax.Array) for x in leaves]
        return cls(**{**form.__dict__, "donated": tuple(flags)})

    # --- the parts of the call -------------------------------------------------------------
    def dynamic(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``(args, kwargs)`` without the static values: what a ``Compiled`` takes."""
        args = tuple(a for i, a in enumerate(self.args) if i not in self.static_argnums)
        kwargs = {k: v for k, v in self.kwargs.items() if k not in self.static_argnames}
        return args, kwargs

    def leaves(self) -> list[Any]:
        """The program's inputs: the dynamic values flattened (the traced jaxpr's invars)."""
        return jax.tree.leaves(self.dynamic())

    @property
    def donates(self) -> bool:
        return any(self.donated)

    def donated_names(self) -> list[str]:
        """The user's names of the arguments holding donated buffers (for notes)."""
        if not self.donates:
            return []
        out = []
        flags = iter(self.donated)
        dyn_args, dyn_kwargs = self.dynamic()
        positions = [i for i in range(len(self.args)) if i not in self.static_argnums]
        for i, value in zip(positions, dyn_args, strict=True):
            if any([next(flags) for _ in jax.tree.leaves(value)]):  # a list: consume them all
                out.append(self.names[i] if i < len(self.names) else f"argument {i}")
        for key in sorted(dyn_kwargs):  # the order jax.tree.leaves gives a dict
            if any([next(flags) for _ in jax.tree.leaves(dyn_kwargs[key])]):
                out.append(key)
        return out

    # --- fresh inputs ------------------------------------------------------------------------
    def fresh_dynamic(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """:meth:`dynamic` with every donated leaf replaced by a fresh copy (ready to use)."""
        dyn = self.dynamic()
        if not self.donates:
            return dyn
        leaves, tree = jax.tree.flatten(dyn)
        copied = iter(
            _copies(
                [x for x, d in zip(leaves, self.donated, strict=True) if d], self.donated_names()
            )
        )
        new = [next(copied) if d else x for x, d in zip(leaves, self.donated, strict=True)]
        return jax.tree.unflatten(tree, new)

    def fresh(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The full call (static values in place) with fresh copies of the donated leaves."""
        dyn_args, dyn_kwargs = self.fresh_dynamic()
        it = iter(dyn_args)
        args = tuple(a if i in self.static_argnums else next(it) for i, a in enumerate(self.args))
        return args, {**self.kwargs, **dyn_kwargs}  # the user's keyword order kept

    # --- calls -------------------------------------------------------------------------------
    def fresh_all(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The full call with a fresh copy of *every* array (for a callable whose own donation
        is not known here, such as a function the user jitted with ``donate_argnums``)."""
        leaves, tree = jax.tree.flatten((self.args, self.kwargs))
        return jax.tree.unflatten(tree, _copies(leaves, list(self.names)))

    def call_compiled(self, compiled: Any) -> Any:
        """One call of a ``jax.stages.Compiled`` of this program (dynamic values only)."""
        args, kwargs = self.fresh_dynamic()
        return compiled(*args, **kwargs)

    def call_jitted(self, jitted: Callable[..., Any]) -> Any:
        """One call of the ``jax.jit`` object (or any callable taking the full call)."""
        args, kwargs = self.fresh()
        return jitted(*args, **kwargs)

    def call_eager(self, fn: Callable[..., Any]) -> Any:
        """One ordinary call of the un-jitted function (it donates nothing: no copies)."""
        return fn(*self.args, **self.kwargs)

    def dynamic_values(self) -> list[Any]:
        """The dynamic values as one positional list: the positional ones, then the keyword
        ones in the call's order (what :meth:`with_static_bound`'s function takes)."""
        dyn_args, dyn_kwargs = self.dynamic()
        return [*dyn_args, *dyn_kwargs.values()]

    def with_static_bound(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` as a function of :meth:`dynamic_values` only, the static values bound as the
        compile bound them."""
        dyn_args, dyn_kwargs = self.dynamic()
        n_pos, keys = len(dyn_args), list(dyn_kwargs)
        static_kwargs = {k: v for k, v in self.kwargs.items() if k in self.static_argnames}

        def bound(*values: Any) -> Any:
            it = iter(values[:n_pos])
            args = [a if i in self.static_argnums else next(it) for i, a in enumerate(self.args)]
            kwargs = {**static_kwargs, **dict(zip(keys, values[n_pos:], strict=True))}
            return fn(*args, **kwargs)

        bound.__name__ = getattr(fn, "__name__", "model")
        return bound

    def dynamic_position(self, i: int) -> int | None:
        """Position of argument ``i`` among the dynamic ones (None when it is static)."""
        if i in self.static_argnums or not 0 <= i < len(self.args):
            return None
        return sum(1 for j in range(i) if j not in self.static_argnums)
