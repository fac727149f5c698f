"""JAX's name stack, watched while tracing (see ``capture/calls.py``). Checked with JAX 0.10.2
and 0.12.0.1 (``source_info_util`` is the same in both: ``current``, ``current_name_stack``,
``NameStack``/``Scope``, the three name-stack context managers, ``_source_info_context``).

A module of its own because its functions stand in for ``source_info_util.current`` while a
trace runs: this file is registered with JAX as not the user's code, so the tracebacks JAX
records (error messages, HLO source metadata, nbcompile's locations) skip these frames exactly
as they skip JAX's own.
"""

from __future__ import annotations

import contextlib
import functools
import types
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from jax._src import source_info_util as _siu
from jax._src import util as _util
from jax._src.lib import xla_client as _xc

__all__ = [
    "forget_traces",
    "name_stack",
    "name_stack_hooks",
    "plain_name_stack_hooks",
    "stack_codes",
    "transformed_callable",
    "transformed_function",
]

# JAX's wrappers of a transformed function, named by their code (JAX 0.10.2 and 0.12.0.1):
# ``jax.jit``'s ``cache_miss``, ``jax.checkpoint``'s ``fun_remat``, ``jax.vmap``'s ``vmap_f``;
# each keeps the function it transforms as the closure variable ``fun``
_TRANSFORM_WRAPPERS = frozenset({"cache_miss", "fun_remat", "vmap_f"})
# ``jax.custom_vjp`` / ``jax.custom_jvp`` objects: ``__call__`` on an object whose ``fun`` it is
_CUSTOM_CALLS = frozenset({"custom_vjp.__call__", "custom_jvp.__call__"})

_siu.register_exclusion(__file__)


def transformed_function(frame: Any) -> Any:
    """The function a call of a JAX transformation runs, given the call's first frame: for
    ``jax.jit(layer)(w, x)``, ``jax.checkpoint(layer)(w, x)``, ``jax.vmap(layer)(w, x)`` and a
    ``jax.custom_vjp``/``custom_jvp`` ``layer``, ``layer`` (functools.partial unwrapped); None
    for any other call. That first frame is JAX's ``api_boundary`` wrapper
    (``reraise_with_filtered_traceback``, closure ``fun``: the wrapper above; JAX 0.10.2 and
    0.12.0.1). JAX may run none of ``layer``'s Python for such a call (its trace is cached)."""
    code = frame.f_code
    if code.co_name != "reraise_with_filtered_traceback" or "fun" not in code.co_freevars:
        return None
    local = frame.f_locals
    inner = local.get("fun")
    inner_code = getattr(inner, "__code__", None)
    if inner_code is None:
        return None
    if inner_code.co_name in _TRANSFORM_WRAPPERS:
        fn = _closure_value(inner, "fun")
    elif getattr(inner, "__qualname__", None) in _CUSTOM_CALLS:
        args = local.get("args")
        fn = getattr(args[0], "fun", None) if isinstance(args, tuple) and args else None
    else:
        return None
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn if isinstance(fn, types.FunctionType) else None


def transformed_callable(fn: Any) -> Any:
    """:func:`transformed_function` told from the object called, before the call runs: the
    user's ``layer`` for ``jax.jit(layer)`` (its ``__wrapped__``), ``jax.checkpoint(layer)``
    and ``jax.vmap(layer)`` (JAX's ``api_boundary`` wrapper of the wrappers named there) and a
    ``jax.custom_vjp``/``custom_jvp`` ``layer`` (its ``fun``); None for any other object."""
    kind = type(fn)
    if kind is types.FunctionType:
        if fn.__code__.co_name != "reraise_with_filtered_traceback":
            return None
        inner = _closure_value(fn, "fun")
        inner_code = getattr(inner, "__code__", None)
        if inner_code is None or inner_code.co_name not in _TRANSFORM_WRAPPERS:
            return None
        found = _closure_value(inner, "fun")
    elif kind.__name__ == "PjitFunction":
        found = getattr(fn, "__wrapped__", None)
    elif kind.__name__ in ("custom_vjp", "custom_jvp"):
        found = getattr(fn, "fun", None)
    else:
        return None
    while isinstance(found, functools.partial):
        found = found.func
    return found if isinstance(found, types.FunctionType) else None


def _closure_value(fn: Any, name: str) -> Any:
    code = fn.__code__
    if name not in code.co_freevars or fn.__closure__ is None:
        return None
    try:
        return fn.__closure__[code.co_freevars.index(name)].cell_contents
    except ValueError:  # an empty cell
        return None


def forget_traces(is_user: Callable[[Any], bool]) -> int:
    """Drop what JAX's tracing caches hold of the user's functions; returns how many entries.

    JAX keeps the program a function traced to, keyed by the function (a ``lax.scan`` body, a
    ``jax.jit``/``jax.checkpoint`` of the user's function, ...), and hands it back to the next
    trace of the same function: with the name stacks of the trace that made it. A recording
    must trace the user's functions itself (their calls are what it records), and must not
    leave its call labels to another trace. So before and after each recording the entries
    keyed by a user function are evicted (JAX's other entries, ``jax.numpy``'s own jits, stay).
    A cache that missed no look-up since it was last looked through holds no new entry, and
    is skipped (most, in a warm process); one cleared since (``jax.clear_caches()`` starts its
    counts again) is looked through.
    JAX 0.10.2 and 0.12.0.1: every such cache is registered in ``util._caches`` and keys are
    tuples led by a weak reference to the function (or to a ``lu.WrappedFun`` of it);
    ``cache_info()`` counts the entries made (misses), the look-ups served (hits) and the
    entries held (currsize)."""
    dropped = 0
    seen: dict[int, bool] = {}  # id(target) -> the user's (targets are alive while keyed)
    function, ref_type = types.FunctionType, weakref.ReferenceType
    for cache in list(getattr(_util, "_caches", {}).keys()):
        evict = getattr(cache, "evict_weakref", None)
        keys = getattr(cache, "cache_keys", None)
        if evict is None or keys is None:
            continue
        info = cache.cache_info()
        looked = _LOOKED.get(cache)
        # no entry made since (misses), none dropped, and not cleared (hits only grow till then)
        if looked is not None and looked == (info.misses, info.currsize, min(info.hits, looked[2])):
            continue
        targets = []
        for key in keys():
            ref = key[0] if type(key) is tuple and key else None
            if type(ref) is not ref_type:
                continue
            target = ref()
            if target is None:
                continue
            users = seen.get(id(target))
            if users is None:
                if type(target) is function:
                    users = is_user(target.__code__)
                else:
                    users = _users_function(target, is_user)
                seen[id(target)] = users
            if users:
                targets.append(target)
        for target in targets:
            evict(target)
            dropped += 1
        info = cache.cache_info()
        _LOOKED[cache] = (info.misses, info.currsize, info.hits)
    return dropped


# cache -> its (misses, currsize, hits) when last looked through
_LOOKED: weakref.WeakKeyDictionary[Any, tuple[int, int, int]] = weakref.WeakKeyDictionary()


def _users_function(obj: Any, is_user: Callable[[Any], bool]) -> bool:
    """A function of the user's, possibly inside ``functools.partial`` or a ``lu.WrappedFun``
    (its ``f``)."""
    for _ in range(6):
        if isinstance(obj, types.FunctionType):
            return is_user(obj.__code__)
        if isinstance(obj, functools.partial):
            obj = obj.func
            continue
        inner = getattr(obj, "f", None)
        if inner is None or inner is obj:
            return False
        obj = inner
    return False


def stack_codes() -> list[Any]:
    """The code objects of this thread's Python frames, innermost first, ``[1]`` the caller of
    this function (``[0]``: this function): read by jaxlib's ``Traceback`` without making frame
    objects."""
    return _xc.Traceback.get_traceback().raw_frames()[0]


def name_stack(elems: list[Any]) -> Any:
    """A JAX name stack of these elements (shared: JAX's ``NameStack`` is immutable)."""
    return _siu.NameStack(tuple(elems))


_SET = _siu.SetNameStackContextManager  # a nested program starts its own name stack
# the context managers that push a scope (``extend_name_stack``: ``jax.named_scope``;
# ``transform_name_stack``) and the one that replaces the stack
_PUSHING = (_siu.ExtendNameStackContextManager, _siu.TransformNameStackContextManager)


@contextlib.contextmanager
def _installed(
    current: Callable[[], Any],
    current_name_stack: Callable[[], Any],
    pushing: Callable[[Callable[[Any], Any]], Callable[[Any], Any]],
    set_entered: Callable[[Any], Any],
    set_exited: Callable[..., Any],
) -> Iterator[None]:
    """JAX's ``current``/``current_name_stack`` and the name-stack context managers' enter and
    exit replaced by a backend's hooks while the body runs; JAX's own put back after, also when
    the body raises. (JAX calls the hooks directly: where they are installed from does not
    change the frames they see.)"""
    siu = _siu
    original = (siu.current, siu.current_name_stack)
    saved = {k: (k.__enter__, k.__exit__) for k in (*_PUSHING, _SET)}
    siu.current, siu.current_name_stack = current, current_name_stack
    for klass in _PUSHING:
        klass.__enter__ = pushing(saved[klass][0])
    _SET.__enter__, _SET.__exit__ = set_entered, set_exited
    try:
        yield
    finally:
        siu.current, siu.current_name_stack = original
        for klass, (enter, exit_) in saved.items():
            klass.__enter__, klass.__exit__ = enter, exit_


@contextlib.contextmanager
def name_stack_hooks(
    stack_for: Callable[[Any, int, tuple[Any, ...]], Any],
    on_push: Callable[[Any, int, Any], None],
    on_set: Callable[[Any, int], None],
) -> Iterator[None]:
    """Watch JAX stamp equations with source information while tracing (JAX 0.10.2).

    ``source_info_util.current()`` is what every new equation's source info comes from; where
    it makes a fresh traceback (the equation is being traced now, not replayed by a transform),
    ``stack_for(frames, own, name_stack_elements)`` may return the name stack to use instead
    (made with :func:`name_stack`; None: JAX's own). Scopes pushed (``extend_name_stack``, used
    by ``jax.named_scope``; ``transform_name_stack``) are reported to ``on_push(frames, own,
    element)``; a name stack replaced (``set_name_stack``: a nested program starts its own) to
    ``on_set(frames, own)`` and, when it ends, ``on_set(None, 0)``.

    ``frames`` is JAX's traceback of the moment as ``(codes, lastis)``, innermost first (its
    ``raw_frames()``): the one the equation keeps or, where JAX makes none, one made the same
    way. ``codes[own]`` is the wrapper here that calls the hook, so inside the hook
    ``sys._getframe(k - own + 1)`` is the frame of ``codes[k]``: a hook reads the frames it
    needs, and no others (a frame object outliving its call makes the call's exit copy it).
    The hooks must not raise. Restores JAX's functions on exit.
    """
    siu = _siu
    context = siu._source_info_context
    original = siu.current
    traceback = _xc.Traceback.get_traceback

    def current() -> Any:
        info = context.context
        if info.traceback:
            return info
        info = original()
        # codes: [0] JAX's current (returned), [1] this function
        ours = stack_for(info.traceback.raw_frames(), 1, info.name_stack.stack)
        if ours is None:
            return info
        return siu.SourceInfo(info.traceback, ours)

    def current_name_stack() -> Any:
        stack = context.context.name_stack
        if context.context.traceback:
            return stack
        ours = stack_for(traceback().raw_frames(), 0, stack.stack)  # [0] this function
        return stack if ours is None else ours

    def pushing(enter: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def wrapped(self: Any) -> Any:
            out = enter(self)
            stack = context.context.name_stack.stack
            if stack:
                on_push(traceback().raw_frames(), 0, stack[-1])
            return out

        return wrapped

    set_enter, set_exit = _SET.__enter__, _SET.__exit__

    def set_entered(self: Any) -> Any:
        out = set_enter(self)
        on_set(traceback().raw_frames(), 0)
        return out

    def set_exited(self: Any, *exc: Any) -> Any:
        on_set(None, 0)
        return set_exit(self, *exc)

    with _installed(current, current_name_stack, pushing, set_entered, set_exited):
        yield


@contextlib.contextmanager
def plain_name_stack_hooks(
    stack_for: Callable[[tuple[Any, ...]], Any],
    on_push: Callable[[Any], None],
    on_set: Callable[[bool], None],
) -> Iterator[None]:
    """:func:`name_stack_hooks` for a backend that knows which user frames run without JAX's
    traceback (``sys.monitoring``): the same moments, no traceback handed over (none is made
    where JAX makes none). ``stack_for(name_stack_elements)``, ``on_push(element)``,
    ``on_set(True)`` when a nested program starts its own name stack, ``on_set(False)`` when it
    ends. Restores JAX's functions on exit."""
    siu = _siu
    context = siu._source_info_context
    original = siu.current
    source_info = siu.SourceInfo

    def current() -> Any:
        info = context.context
        if info.traceback:
            return info
        info = original()
        ours = stack_for(info.name_stack.stack)
        return info if ours is None else source_info(info.traceback, ours)

    def current_name_stack() -> Any:
        now = context.context
        if now.traceback:
            return now.name_stack
        ours = stack_for(now.name_stack.stack)
        return now.name_stack if ours is None else ours

    def pushing(enter: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def wrapped(self: Any) -> Any:
            out = enter(self)
            stack = context.context.name_stack.stack
            if stack:
                on_push(stack[-1])
            return out

        return wrapped

    set_enter, set_exit = _SET.__enter__, _SET.__exit__

    def set_entered(self: Any) -> Any:
        out = set_enter(self)
        on_set(True)
        return out

    def set_exited(self: Any, *exc: Any) -> Any:
        on_set(False)
        return set_exit(self, *exc)

    with _installed(current, current_name_stack, pushing, set_entered, set_exited):
        yield
