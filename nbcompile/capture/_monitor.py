"""The call capture's Python 3.12 backend: ``sys.monitoring`` events for the user's code only.

(Python 3.13+ runs ``_events.py``, which keeps the labels in JAX's context with no hook at each
equation; this one stays for 3.12, where ``f(*args)`` fires no ``CALL`` event, and is tested on
3.13 against the others.)

``PY_START`` fires for every function that starts; for a code object that is not the user's
(:func:`~nbcompile.capture.userfiles.is_user_file`) the callback answers ``DISABLE``, so after
its first call that code runs unwatched. The user's code objects get local events: ``PY_RETURN``
/ ``PY_YIELD`` / ``PY_RESUME`` keep a stack of the user frames running on the tracing thread, and
``CALL`` counts the calls each makes (a new count: the library call it may be making is another
one). ``PY_UNWIND`` and ``PY_THROW`` (which cannot be disabled) keep the stack right when an
exception leaves a user frame or is thrown into a generator.

So at each moment JAX stamps an equation the innermost user frame is the top of that stack, and
the library call it is making (``child``: its callee's frame, found once per call by walking up
from the hook) is known without reading JAX's traceback: the equation hook reads one attribute
(``f_lasti``) where the 3.11 backend scans the traceback. Both feed the same frames to
:class:`~nbcompile.capture._record.Recorder`, so both give the same calls and labels.

sys.monitoring is left as found: the tool id is freed, its callbacks and local events removed,
and ``restart_events()`` re-arms what ``DISABLE`` turned off (for every tool: other tools' disabled
events fire once more, as they may after any tool's restart), also when the trace fails. Where
both tool ids nbcompile may use (3, 4: unassigned by Python's convention) are taken, the caller
falls back to the 3.11 backend (``_frames.py``).
Keeping the tool id and what ``DISABLE`` turned off from one recording to the next (no restart)
was measured and not taken: it spares the ~780 ``PY_START`` callbacks a GPT-2 small trace makes
for library code objects met again, and no time that could be measured (thread CPU, minimum of
10 alternated traces: 528 ms restarting, 530 ms keeping, 530 ms without events; 2026-12-04).

Where the rest of the cost is (GPT-2 small train step, Python 3.13, JAX 0.12.0.1, thread CPU,
minima of 14-16 alternated traces on a busy 2-core machine, 2026-12-04): the trace is about
1.11-1.14x the trace without capture (benchmarks' capture row). The hooks and events installed
but answering nothing cost about +6 ms; finding the innermost user frame and the memo look-ups
at ~9,400 equation stamps about +18 ms; the recorder placing 1,157 calls and writing their
labels (2,480 stamps the memo does not answer, 2,072 nested programs started) about +40 ms, of
which a sampling profile finds only half in its own lines (the rest: allocation, collection,
frame objects). The frames the recorder holds are freed as it ends (~10 ms there): freeing
them at each return instead moved that time into the trace and saved nothing.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from . import _namestack, _record
from ._callsite import CALL_EX, CALL_OPS, call_at, in_loop
from ._record import CallLog, Recorder

__all__ = ["TOOL_IDS", "available", "record"]

TOOL_IDS = (3, 4)  # 0 debugger, 1 coverage, 2 profiler, 5 optimizer by Python's convention
_NAME = "nbcompile call capture"
# Python 3.12 fires no CALL event for CALL_FUNCTION_EX (``f(*args)``): such a call's callee is
# found again at each equation (see _Stack.now)
_EX_EVENTS = sys.version_info >= (3, 13)
_MEMO = 64  # nested programs whose equation-hook answer is kept (see _hooks)


def available() -> bool:
    """sys.monitoring exists (Python >= 3.12) and one of :data:`TOOL_IDS` is free."""
    mon = getattr(sys, "monitoring", None)
    return mon is not None and any(mon.get_tool(t) is None for t in TOOL_IDS)


class _Entry:
    """One user frame running on the tracing thread."""

    __slots__ = ("calls", "child", "child_calls", "code", "frame", "lasti", "named", "reuse")

    def __init__(self, frame: Any, code: Any) -> None:
        self.frame, self.code = frame, code
        self.calls = 0  # CALL events seen in this frame
        self.lasti = -1  # the instruction last looked at, and whether it is a named call
        self.named = False
        self.reuse = True  # whether ``child`` may be reused while ``calls`` is unchanged
        self.child: Any = None  # the frame the named call at ``lasti`` runs in
        self.child_calls = -1


class _Stack:
    """The user frames running on the tracing thread, kept by the events."""

    def __init__(self, rec: Recorder, tool: int, thread: int) -> None:
        self.rec, self.tool, self.thread = rec, tool, thread
        self.entries: list[_Entry] = []
        self.armed: dict[int, Any] = {}  # id(code) -> code: user code given local events

    def now(self) -> tuple[Any, Any]:
        """(innermost user frame, the frame of the named call it is making or None); the root
        where no user frame runs (``Recorder.at`` answers None there)."""
        entries = self.entries
        if not entries:
            return self.rec.root, None
        e = entries[-1]
        frame = e.frame
        lasti = frame.f_lasti
        if lasti != e.lasti:
            op = call_at(e.code, lasti)[1]
            e.lasti, e.named, e.child = lasti, op in CALL_OPS, None
            e.reuse = _EX_EVENTS or op != CALL_EX
        if not e.named:
            return frame, None
        if e.child is not None and e.child_calls == e.calls and e.reuse:
            return frame, e.child  # the same call as at the last equation
        e.child, e.child_calls = _child_of(frame), e.calls
        return frame, e.child

    def drop(self, frame: Any) -> None:
        """``frame`` returns: drop it and any frame above it (their returns were missed)."""
        entries = self.entries
        for k in range(len(entries) - 1, -1, -1):
            if entries[k].frame is frame:
                del entries[k:]
                return


def _child_of(frame: Any) -> Any:
    """The frame ``frame`` calls (None: not on this thread's stack). Found in JAX's traceback
    of this moment, which reads the stack without making a frame object of each frame (walking
    ``f_back`` would, and each such frame's return then copies it: ~5 % of a trace)."""
    codes = _namestack.stack_codes()  # [k + 1]: sys._getframe(k) here
    code = frame.f_code
    i = 1
    while True:
        # ``index`` compares by identity first; another code object equal to this one (a copy
        # of the same source) is skipped by the checks below
        try:
            i = codes.index(code, i + 1)
        except ValueError:
            return None
        if codes[i] is code and sys._getframe(i - 1) is frame:  # not a recursion's other frame
            return sys._getframe(i - 2)


@contextlib.contextmanager
def record(root: Any, timed: bool = False) -> Iterator[CallLog]:
    """Record the user's calls below ``root`` while the body traces (see ``capture/calls.py``).
    Raises ``ValueError`` before anything changed when no tool id is free."""
    mon = sys.monitoring
    tool = _take_tool(mon)
    rec = Recorder(root)
    rec.log.backend = "monitoring"
    thread = threading.get_ident()
    st = _Stack(rec, tool, thread)
    callbacks = _callbacks(st, mon, tool, thread)
    hooks = _hooks(st, thread, timed)
    try:
        for event, fn in callbacks.items():
            mon.register_callback(tool, event, fn)
        ev = mon.events
        mon.set_events(tool, ev.PY_START | ev.PY_UNWIND | ev.PY_THROW)
        with _namestack.plain_name_stack_hooks(*hooks):
            yield rec.log
    finally:
        _release_tool(mon, tool, st.armed, callbacks)
        rec.finish()


def _callbacks(st: _Stack, mon: Any, tool: int, thread: int) -> dict[int, Any]:
    """sys.monitoring's callbacks: keep ``st.entries``, the user frames running on ``thread``.
    They run for every function's first start (answering DISABLE for library code) and for
    the user's code only after that: cheap and never raising."""
    entries, armed, broken = st.entries, st.armed, st.rec.broken
    codes, user_code = _record._CODES, _record.user_code
    get_ident, getframe = threading.get_ident, sys._getframe
    ev = mon.events
    disable = mon.DISABLE
    local = ev.PY_RETURN | ev.PY_YIELD | ev.PY_RESUME | ev.CALL

    def start(code: Any, offset: int) -> Any:  # PY_START (global), PY_RESUME (local)
        hit = codes.get(id(code))
        if not (hit[1] if hit is not None and hit[0] is code else user_code(code)):
            return disable
        if get_ident() != thread or broken:
            return None
        try:
            entries.append(_Entry(getframe(1), code))
            if id(code) not in armed:
                armed[id(code)] = code
                mon.set_local_events(tool, code, local)
        except Exception as exc:  # never the user's problem: stop recording
            broken.append(exc)
        return None

    def leave(code: Any, offset: int, value: Any) -> None:  # PY_RETURN, PY_YIELD (local)
        if get_ident() != thread:
            return
        if entries and entries[-1].code is code:
            entries.pop()
        else:  # not expected: a frame whose return was missed
            st.drop(getframe(1))

    def unwind(code: Any, offset: int, exc: BaseException) -> None:  # PY_UNWIND (global)
        if entries and entries[-1].code is code and get_ident() == thread:
            entries.pop()

    def thrown(code: Any, offset: int, exc: BaseException) -> None:  # PY_THROW (global)
        if get_ident() == thread and not broken and user_code(code):
            entries.append(_Entry(getframe(1), code))

    def called(code: Any, offset: int, fn: Any, arg0: Any) -> Any:  # CALL (local)
        # the count tells two calls at one instruction apart: only a loop runs one twice in a
        # frame, so a call outside loops is not watched again (until the recording ends)
        if not in_loop(code, offset):
            return disable
        if entries and get_ident() == thread:
            top = entries[-1]
            if top.code is code:
                top.calls += 1
        return None

    return {
        ev.PY_START: start,
        ev.PY_RESUME: start,
        ev.PY_RETURN: leave,
        ev.PY_YIELD: leave,
        ev.PY_UNWIND: unwind,
        ev.PY_THROW: thrown,
        ev.CALL: called,
    }


def _hooks(st: _Stack, thread: int, timed: bool) -> tuple[Any, Any, Any]:
    """The name-stack hooks (see ``_namestack.plain_name_stack_hooks``). The equation hook
    answers as last time in the same nested program while the innermost user frame, its
    instruction, its count of calls and the name stack are those of last time (most
    equations)."""
    rec = st.rec
    entries, broken, barriers, root = st.entries, rec.broken, rec.barriers, rec.root
    now, rec_stack_for, at = st.now, rec.stack_for, rec.at
    get_ident = threading.get_ident
    # the last answer in each nested program (by its barrier: equations alternate between a
    # nested program and the one around it, as a library call's own jit runs):
    # id(barrier) -> (barrier, entry, its f_lasti, its calls, stack, out, no call at f_lasti)
    memo: dict[int, tuple[Any, Any, int, int, Any, Any, bool]] = {}

    def stack_for(stack: tuple[Any, ...]) -> Any:
        if broken or get_ident() != thread:
            return None
        try:
            if entries:
                e = entries[-1]
                lasti = e.frame.f_lasti
                barrier = barriers[-1] if barriers else None
                m = memo.get(id(barrier))
                if m is not None and m[1] is e and m[4] is stack and m[0] is barrier:
                    if m[2] == lasti and m[3] == e.calls and e.reuse:
                        return m[5]
                    # no call at either instruction (``x @ w``, ``a + b``): the frame's own
                    # call, whichever instruction
                    if m[6] and call_at(e.code, lasti)[1] not in CALL_OPS:
                        return m[5]
                frame, child = now()
                out = rec_stack_for(frame, child, stack)
                if len(memo) > _MEMO:
                    memo.clear()
                plain = not e.named and e.lasti == lasti
                memo[id(barrier)] = (barrier, e, lasti, e.calls, stack, out, plain)
                return out
            return rec_stack_for(root, None, stack)
        except Exception as exc:  # never the user's problem: stop recording
            broken.append(exc)
            return None

    def on_push(elem: Any) -> None:
        if broken or get_ident() != thread:
            return
        try:
            rec.pushed(elem, *now())
        except Exception as exc:
            broken.append(exc)

    def on_set(entering: bool) -> None:
        if broken or get_ident() != thread:
            return
        try:
            if entering:
                barriers.append(at(*now()))
            elif barriers:
                barriers.pop()
        except Exception as exc:
            broken.append(exc)

    if not timed:
        return stack_for, on_push, on_set
    clock = time.perf_counter

    def timed_stack_for(stack: tuple[Any, ...]) -> Any:
        t0 = clock()
        try:
            return stack_for(stack)
        finally:
            rec.log.seconds += clock() - t0

    return timed_stack_for, on_push, on_set


def _take_tool(mon: Any) -> int:
    for tool in TOOL_IDS:
        try:
            mon.use_tool_id(tool, _NAME)
        except ValueError:  # taken
            continue
        return tool
    raise ValueError(f"sys.monitoring tool ids {TOOL_IDS} are all in use")


def _release_tool(mon: Any, tool: int, armed: dict[int, Any], callbacks: dict[int, Any]) -> None:
    """Leave sys.monitoring as found: events off, callbacks and local events gone, the tool id
    free, and what DISABLE turned off re-armed (it outlives the tool id on 3.12 and 3.13)."""
    try:
        mon.set_events(tool, 0)
        for code in armed.values():
            mon.set_local_events(tool, code, 0)
        for event in callbacks:
            mon.register_callback(tool, event, None)
    finally:
        armed.clear()
        mon.free_tool_id(tool)
        mon.restart_events()
