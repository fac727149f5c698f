"""JAX's name stack, watched while tracing (see ``capture/calls.py``). Checked with JAX 0.10.2.

A module of its own because its functions stand in for ``source_info_util.current`` while a
trace runs: this file is registered with JAX as not the user's code, so the tracebacks JAX
records (error messages, HLO source metadata, nbcompile's locations) skip these frames exactly
as they skip JAX's own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from jax._src import source_info_util as _siu
from jax._src.lib import xla_client as _xc

__all__ = ["name_stack", "name_stack_hooks"]

_siu.register_exclusion(__file__)


def name_stack(elems: list[Any]) -> Any:
    """A JAX name stack of these elements (shared: JAX's ``NameStack`` is immutable)."""
    return _siu.NameStack(tuple(elems))


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
    original, original_stack = siu.current, siu.current_name_stack
    traceback = _xc.Traceback.get_traceback
    ext, tra, setn = (
        siu.ExtendNameStackContextManager,
        siu.TransformNameStackContextManager,
        siu.SetNameStackContextManager,
    )
    saved = {k: (k.__enter__, k.__exit__) for k in (ext, tra, setn)}

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

    set_enter, set_exit = saved[setn]

    def set_entered(self: Any) -> Any:
        out = set_enter(self)
        on_set(traceback().raw_frames(), 0)
        return out

    def set_exited(self: Any, *exc: Any) -> Any:
        on_set(None, 0)
        return set_exit(self, *exc)

    siu.current, siu.current_name_stack = current, current_name_stack
    ext.__enter__ = pushing(saved[ext][0])
    tra.__enter__ = pushing(saved[tra][0])
    setn.__enter__, setn.__exit__ = set_entered, set_exited
    try:
        yield
    finally:
        siu.current, siu.current_name_stack = original, original_stack
        for klass, (enter, exit_) in saved.items():
            klass.__enter__, klass.__exit__ = enter, exit_
