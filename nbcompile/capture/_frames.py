"""The call capture's Python 3.11 backend: the user's frames read from JAX's traceback.

At each moment JAX stamps an equation (``source_info_util.current()``), pushes a scope or starts
a nested program, the wrappers in ``_namestack`` hand over JAX's traceback of that moment (code
objects and instruction offsets, innermost first); :meth:`FramesRecorder.frames` finds the
innermost user frame in it and the frame that one is calling, reading only those frames. The
common case (the next equation of the same line) is checked at C speed. Cost: about 1.2x the
trace of the GPT-2-small train step (benchmarks' capture row); Python 3.12+ uses ``_monitor.py``.
"""

from __future__ import annotations

import contextlib
import operator
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from . import _namestack
from ._callsite import is_call
from ._record import CallLog, Recorder

__all__ = ["FramesRecorder", "record"]

_CLEAN = 1024  # chains of JAX's frames known to hold no user code (see _inside_clean)
_CHAINS = 8  # of those, kept under one key (its ends and length)


class FramesRecorder(Recorder):
    """:class:`Recorder` fed from JAX's tracebacks."""

    def __init__(self, root: Any) -> None:
        super().__init__(root)
        self.hot: tuple[Any, int, Any, int, bool] = (None, 1 << 30, None, -1, False)  # frames
        self.clean: dict[tuple[int, int, int], list[list[Any]]] = {}  # see _inside_clean

    def frames(self, raw: Any, own: int, depth: int) -> tuple[Any, Any]:
        """The innermost user frame and the frame it is calling (None: it asked itself, or
        calls no function it names), read from JAX's traceback of the moment (``raw``: its
        ``(codes, lastis)``, innermost first):
        the first user code from ``codes[own + 1]`` on, or the root's code (nothing of the
        user's runs below the root). ``codes[own]`` is the wrapper in ``_namestack`` that asked
        and this method runs ``depth`` frames above it, so ``codes[k]`` is the frame
        ``sys._getframe(k - own + depth)``; only the frames returned are read (no other frame
        object is made or kept: one outliving its call makes the call's exit copy it).
        Nothing found: JAX's traceback stops below the frame where a nested trace began
        (``trace_to_jaxpr``), so that frame, to walk on from (None: the traceback was all).
        """
        codes, lastis = raw
        n = len(codes)
        # the frame found last time, counted from the bottom; the instruction it was at and
        # whether that is a call
        code, below, hot, hot_lasti, named = self.hot
        i = n - 1 - below
        if own < i and codes[i] is code:
            # the same code at the same height with nothing of the user's inside it: the common
            # case (the next equation of the same line), checked at C speed
            inner = codes[own + 1 : i]
            clean = not inner
            if inner:
                seen = self.clean.get((id(inner[0]), id(inner[-1]), i - own - 1))
                if seen is not None:
                    for chain in seen:  # the same codes, not equal ones (see _inside_clean)
                        if all(map(operator.is_, chain, inner)):
                            clean = True
                            break
                clean = clean or self._inside_clean(inner)
            if clean:
                frame = sys._getframe(i - own + depth)
                if frame is hot:
                    lasti = lastis[i]
                    if lasti != hot_lasti:
                        named = is_call(code, lasti)
                        self.hot = (code, below, hot, lasti, named)
                    if named and i > own + 1:
                        return frame, sys._getframe(i - 1 - own + depth)
                    return frame, None
        stops = self.stops  # id(code) -> True: user code or the root's, False: neither
        for i in range(own + 1, n):
            stop = stops.get(id(codes[i]))
            if stop is None:
                stop = self.is_user(codes[i])
            if stop:
                frame = sys._getframe(i - own + depth)
                if frame.f_code is not codes[i]:  # not expected: walk from the frame that asked
                    return sys._getframe(1 + depth), None
                self.hot = (codes[i], n - 1 - i, frame, -1, False)
                return frame, self._callee_frame(codes, lastis, i, own, depth)
        try:
            frame = sys._getframe(n - own + depth)
        except ValueError:
            return None, None
        if n > own + 1 and sys._getframe(n - 1 - own + depth).f_code is not codes[n - 1]:
            # the traceback is not this thread's stack as it is now (not expected): walk
            return sys._getframe(1 + depth), None
        return frame, None

    def _inside_clean(self, inner: list[Any]) -> bool:
        """None of ``inner`` (a chain of codes, not empty) is the user's or the root's code;
        remembered when so. :meth:`frames` first looks for the chain among the few remembered
        under its ends and length, code by code by identity: equal code objects are not the
        same code (a byte-identical copy of a library function in the user's file equals it,
        as Python compares code, but is the user's), and no code object is hashed (that hashes
        its bytecode). Several per key: chains that differ only inside (``tangent_fun`` or
        ``_pjit_linearize`` between the same two frames) alternate equation by equation."""
        if not all(map(self.other.__contains__, map(id, inner))):
            return False
        key = (id(inner[0]), id(inner[-1]), len(inner))
        seen = self.clean.get(key)
        if seen is None:
            if len(self.clean) >= _CLEAN:
                self.clean.clear()
            seen = self.clean[key] = []
        elif len(seen) >= _CHAINS:
            del seen[0]
        seen.append(inner)  # holds the codes: the ids in the key stay their own
        return True

    @staticmethod
    def _callee_frame(codes: Any, lastis: Any, i: int, own: int, depth: int) -> Any:
        """The frame ``codes[i]`` is calling, where it is at a call instruction (``gelu(h)``,
        ``x.var()``, ``jax.checkpoint(layer)(w, x)``); None for an operator (``x @ w``), or
        where ``codes[i]`` asked itself. ``own``, ``depth``: as for
        :meth:`frames`, which calls this (so ``codes[i - 1]`` is one frame further up)."""
        if i <= own + 1 or not is_call(codes[i], lastis[i]):
            return None
        return sys._getframe(i - own + depth)


@contextlib.contextmanager
def record(root: Any, timed: bool = False) -> Iterator[CallLog]:
    """Record the user's calls below ``root`` (the frame that asked) while the body traces (see
    ``capture/calls.py``); the hooks never fail the trace (see :func:`Recorder.guarded`)."""
    rec = FramesRecorder(root)
    thread = threading.get_ident()
    get_ident, clock = threading.get_ident, time.perf_counter
    broken = rec.broken
    # the wrappers in ``_namestack`` call these directly: ``raw[0][own]`` is the wrapper, these
    # run one frame above it and ``rec.frames`` two (its ``depth``)

    def stack_for(raw: Any, own: int, stack: tuple[Any, ...]) -> Any:
        if broken or get_ident() != thread:
            return None
        t0 = clock() if timed else 0.0
        try:
            return rec.stack_for(*rec.frames(raw, own, 2), stack)
        except Exception as exc:  # never the user's problem: stop recording
            broken.append(exc)
            return None
        finally:
            if timed:
                rec.log.seconds += clock() - t0

    def on_push(raw: Any, own: int, elem: Any) -> None:
        if broken or get_ident() != thread:
            return
        try:
            rec.pushed(elem, *rec.frames(raw, own, 2))
        except Exception as exc:
            broken.append(exc)

    def on_set(raw: Any, own: int) -> None:
        if broken or get_ident() != thread:
            return
        try:
            if raw is None:
                rec.barrier_ends()
            else:
                rec.barrier_starts(*rec.frames(raw, own, 2))
        except Exception as exc:
            broken.append(exc)

    try:
        with _namestack.name_stack_hooks(stack_for, on_push, on_set):
            yield rec.log
    finally:
        rec.finish()
