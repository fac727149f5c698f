"""JAX's name stack, watched while tracing (see ``capture/calls.py``). Checked with JAX 0.10.2.

A module of its own because its functions stand in for ``source_info_util.current`` while a
trace runs: this file is registered with JAX as not the user's code, so the tracebacks JAX
records (error messages, HLO source metadata, nbcompile's locations) skip these frames exactly
as they skip JAX's own.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

from jax._src import source_info_util as _siu

__all__ = ["name_stack_hooks"]

_siu.register_exclusion(__file__)


@contextlib.contextmanager
def name_stack_hooks(
    on_current: Callable[[Any, tuple[Any, ...]], list[Any] | None],
    on_push: Callable[[Any, Any], None],
    on_set: Callable[[Any | None], None],
) -> Iterator[None]:
    """Watch JAX stamp equations with source information while tracing (JAX 0.10.2).

    ``source_info_util.current()`` is what every new equation's source info comes from; where
    it makes a fresh traceback (the equation is being traced now, not replayed by a transform),
    ``on_current(frame, name_stack_elements)`` may return the elements to use instead. Scopes
    pushed (``extend_name_stack``, used by ``jax.named_scope``; ``transform_name_stack``) are
    reported to ``on_push(frame, element)``; a name stack replaced (``set_name_stack``: a nested
    program starts its own) to ``on_set(frame)`` and, when it ends, ``on_set(None)``. ``frame``
    is the Python frame that asked. Restores JAX's functions on exit.
    """
    siu = _siu
    context = siu._source_info_context
    original, original_stack = siu.current, siu.current_name_stack
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
        elems = on_current(sys._getframe(1), info.name_stack.stack)
        if elems is None:
            return info
        return siu.SourceInfo(info.traceback, siu.NameStack(tuple(elems)))

    def current_name_stack() -> Any:
        stack = context.context.name_stack
        if context.context.traceback:
            return stack
        elems = on_current(sys._getframe(1), stack.stack)
        return stack if elems is None else siu.NameStack(tuple(elems))

    def pushing(enter: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def wrapped(self: Any) -> Any:
            out = enter(self)
            stack = context.context.name_stack.stack
            if stack:
                on_push(sys._getframe(1), stack[-1])
            return out

        return wrapped

    set_enter, set_exit = saved[setn]

    def set_entered(self: Any) -> Any:
        out = set_enter(self)
        on_set(sys._getframe(1))
        return out

    def set_exited(self: Any, *exc: Any) -> Any:
        on_set(None)
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
