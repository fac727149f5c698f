"""Module names in the traced program: ``jax.named_scope`` around submodule calls.

Flax Linen (named_call) and Keras (layer-name scopes) already put module names in the jaxpr name
stack; Flax NNX and Equinox do not. For those, :func:`module_scopes` wraps, *for the duration of
one call*, the ``__call__`` of every class that owns the ``__call__`` of a module in the model, so
that calling a submodule enters ``jax.named_scope(<its attribute path>)``. How it stays safe:

- the path of each module object is computed by walking the model right before the call and kept
  in a context variable keyed by ``id()``; objects not in the map (other models, other threads,
  objects created inside the call) pass straight through to the original ``__call__``;
- the wrapper only adds a name scope, so numerics are unchanged;
- patches are reference-counted per class under a lock and restored exactly (an inherited
  ``__call__`` is removed again, an own one is put back) when the last active call leaves;
- a module calling ``super().__call__`` does not open a second scope (the innermost active module
  is the same object), and a submodule reached through an ancestor's attribute gets its path
  relative to the innermost active module (``attn/q_proj`` when called from the block itself).

Paths are the attribute names from the model root, with list/tuple indices joined to the
attribute by ``_`` (``blocks_0/attn``) and the root named after its class (``Transformer``).
"""

from __future__ import annotations

import contextlib
import contextvars
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import jax

__all__ = ["format_path", "module_paths", "module_scopes", "scope_path", "user_scopes"]


def format_path(parts: Iterable[Any]) -> tuple[str, ...]:
    """``("blocks", 0, "attn")`` -> ``("blocks_0", "attn")``: indices join the name before them."""
    out: list[str] = []
    for part in parts:
        key = getattr(part, "key", getattr(part, "idx", getattr(part, "name", part)))
        if isinstance(key, int) and not isinstance(key, bool):
            out.append(f"{out.pop()}_{key}" if out else str(key))
        else:
            out.append(str(key))
    return tuple(out)


@dataclass
class _Active:
    paths: dict[int, tuple[str, ...]]
    stack: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)


_ACTIVE: contextvars.ContextVar[_Active | None] = contextvars.ContextVar(
    "nbcompile_module_scopes", default=None
)
_LOCK = threading.RLock()
# class -> (number of active users, own __call__ before patching or None when inherited)
_PATCHED: dict[type, tuple[int, Any]] = {}


def _owner_of_call(cls: type) -> type | None:
    for klass in cls.__mro__:
        if "__call__" in klass.__dict__:
            return None if klass is object else klass
    return None


def _scope_name(active: _Active, obj_id: int) -> str | None:
    path = active.paths.get(obj_id)
    if path is None:
        return None
    if active.stack:
        top_id, top_path = active.stack[-1]
        if top_id == obj_id:
            return None
        if path[: len(top_path)] == top_path and len(path) > len(top_path):
            return "/".join(path[len(top_path) :])
        return path[-1]
    return "/".join(path)


def _make_wrapper(original: Any) -> Callable[..., Any]:
    # ``original`` is whatever the class held (a function or another descriptor): bind it the
    # way attribute lookup would.
    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        call = original.__get__(self, type(self))
        active = _ACTIVE.get()
        name = None if active is None else _scope_name(active, id(self))
        if active is None or name is None:
            return call(*args, **kwargs)
        active.stack.append((id(self), active.paths[id(self)]))
        try:
            with jax.named_scope(name):
                return call(*args, **kwargs)
        finally:
            active.stack.pop()

    __call__.__wrapped__ = original  # type: ignore[attr-defined]
    __call__._nbcompile_scope_wrapper = True  # type: ignore[attr-defined]
    return __call__


def _patch(owner: type) -> None:
    with _LOCK:
        count, saved = _PATCHED.get(owner, (0, None))
        if count == 0:
            saved = owner.__dict__["__call__"]
            if getattr(saved, "_nbcompile_scope_wrapper", False) or not hasattr(saved, "__get__"):
                return  # already wrapped by an enclosing call, or not something we can bind
            owner.__call__ = _make_wrapper(saved)  # type: ignore[method-assign]
        _PATCHED[owner] = (count + 1, saved)


def _unpatch(owner: type) -> None:
    with _LOCK:
        if owner not in _PATCHED:
            return
        count, saved = _PATCHED[owner]
        if count <= 1:
            del _PATCHED[owner]
            owner.__call__ = saved  # type: ignore[method-assign]
        else:
            _PATCHED[owner] = (count - 1, saved)


@contextlib.contextmanager
def module_scopes(modules: Iterable[tuple[tuple[str, ...], Any]]) -> Iterator[None]:
    """Within the block, calling any of ``modules`` (``(path, module)`` pairs) opens its scope."""
    pairs = list(modules)
    paths: dict[int, tuple[str, ...]] = {}
    owners: list[type] = []
    for path, module in pairs:
        paths.setdefault(id(module), path)
        owner = _owner_of_call(type(module))
        if owner is not None and owner not in owners:
            owners.append(owner)
    patched: list[type] = []
    token = _ACTIVE.set(_Active(paths))
    try:
        for owner in owners:
            _patch(owner)
            patched.append(owner)
        yield
    finally:
        for owner in reversed(patched):
            _unpatch(owner)
        _ACTIVE.reset(token)


def _sub_jaxprs(eqn: Any) -> Iterator[Any]:
    for value in eqn.params.values():
        items = value if isinstance(value, list | tuple) else [value]
        for item in items:
            inner = getattr(item, "jaxpr", item)
            if hasattr(inner, "eqns"):
                yield inner


# Scopes JAX itself names in op names and name stacks (not the user's modules): control flow
# (``while/body``, ``while/cond``, ``cond/branch_1_fun``, ``closed_call``, ``checkpoint``) and
# the subscripts ``jnp.einsum`` scopes its contraction under (``bthd,bshd->bhts``).
_JAX_SCOPES = frozenset({"while", "closed_call", "core_call", "checkpoint", "remat"})
_BRANCH = re.compile(r"^branch_\d+_fun$")


def _made_by_jax(parts: list[str], i: int) -> bool:
    part = parts[i]
    before = parts[i - 1] if i else ""
    after = parts[i + 1] if i + 1 < len(parts) else ""
    return (
        part in _JAX_SCOPES
        or "->" in part
        or _BRANCH.match(part) is not None
        or (before == "while" and part in ("body", "cond"))
        or (part == "cond" and _BRANCH.match(after) is not None)
    )


def user_scopes(parts: list[str]) -> list[str]:
    """``parts`` of a module path without the scopes JAX made: ``attn/bthd,bshd->bhts`` ->
    ``attn``, ``while/body/closed_call/mlp`` -> ``mlp``, ``cond/branch_1_fun`` -> nothing."""
    return [part for i, part in enumerate(parts) if not _made_by_jax(parts, i)]


def scope_path(name_stack: Any) -> str:
    """The module path of a name stack without its transforms: ``vmap(q_proj)`` -> ``q_proj``.

    ``str(name_stack)`` wraps scopes entered under a transform in its name (``vmap(attn)``,
    ``transpose(jvp(Model))/dense1``); this keeps only the scope names. It reads the stack's
    ``Scope``/``Transform`` entries (JAX >= 0.4.x) and falls back to stripping ``name(...)``
    wrappers from the string form.
    """
    elements = getattr(name_stack, "stack", None)
    if isinstance(elements, tuple) and all(hasattr(e, "name") for e in elements):
        names = [e.name for e in elements if type(e).__name__ == "Scope" and e.name]
        return "/".join(user_scopes(names))
    text, previous = str(name_stack), None
    while previous != text:
        previous, text = text, _TRANSFORM.sub(r"\1", text)
    return "/".join(user_scopes([part for part in text.split("/") if part]))


_TRANSFORM = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\(([^()]*)\)")


def module_paths(closed_jaxpr: Any, *, keep_transforms: bool = False) -> set[str]:
    """Every non-empty module path in a (closed) jaxpr's name stacks, sub-jaxprs included.

    A sub-jaxpr's paths are prefixed with the path of the equation that holds it (``jit``,
    ``scan``, ``cond``, ``custom_jvp_call``, ...), as they are when the program is lowered.
    Transforms (``vmap(...)``, ``jvp(...)``) are dropped unless ``keep_transforms``, in which
    case the paths are ``str(eqn.source_info.name_stack)`` as JAX prints them.
    """
    found: set[str] = set()

    def visit(jaxpr: Any, prefix: str) -> None:
        for eqn in jaxpr.eqns:
            stack = eqn.source_info.name_stack
            own = str(stack) if keep_transforms else scope_path(stack)
            path = "/".join(p for p in (prefix, own) if p)
            if path:
                found.add(path)
            for inner in _sub_jaxprs(eqn):
                visit(inner, path)

    visit(getattr(closed_jaxpr, "jaxpr", closed_jaxpr), "")
    return found
