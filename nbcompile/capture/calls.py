"""The user's function calls while tracing: exact call structure, carried in JAX's name stack.

While ``jitted.trace(...)`` runs, :func:`record_calls` watches the moments JAX stamps a new
equation with its source information (``source_info_util.current()``) and the moments a name
scope is pushed. At each, it finds the user's frames running: every frame of a function from the
user's own files (:func:`~nbcompile.capture.userfiles.is_user_file`) is one *call*, identified by
its frame object (so two calls from the same loop line are two calls), numbered per function
under its caller (``block#1`` … ``block#12``). A call the user's code makes into a library
(``jax.nn.gelu(h)``, ``x.var()``, ``optax.adam(...)``) is one *library call* named as the user
wrote it (the last name before the call's parentheses in the source: ``gelu``, ``var``); one
that calls back into the user's code (``jax.value_and_grad(loss)``, ``jax.lax.scan(body, ...)``)
is transparent: the user's function inside is the group.

The call path is written into the equation's name stack (``block#3/gelu/tanh``), interleaved
exactly with the scopes already there (``jax.named_scope``, model module paths, transforms) by
which call was running when each scope was pushed. The name stack is what JAX keeps through
``jvp``/``transpose`` (backward equations read ``transpose(jvp(loss#1))/block#3/…``) and writes
into the HLO ``op_name`` metadata, so every later view sees the same calls. Only metadata
changes: the program and its numerics are the same. What was recorded is kept as
:class:`CallLog` (``Stages.calls``); ``analysis/calls.py`` turns it into groups.

Three backends, one recorder (``_record.py``) of calls and labels, so all give the same calls,
labels and name stacks (``tests/analysis/test_capture_backends.py``, ``test_capture_edges.py``):
on Python 3.13+ ``sys.monitoring`` events for the user's code keep the running calls' labels in
JAX's own name-stack context, with nothing done per equation (``_events.py``); on 3.12 the same
events find the innermost user frame at each equation (``_monitor.py``); on 3.11 JAX's traceback
of each equation does (``_frames.py``; about 1.2x the trace of the GPT-2 small train step). At
most ``_record.MAX_CALLS`` calls are recorded per trace (``CallLog.capped``). The traceback
backend also runs on 3.12+ where the monitoring tool ids are taken (a debugger or profiler
holding them) or when asked for (``record_calls(backend="frames")``,
``NBCOMPILE_CALL_CAPTURE=frames``).

Not calls: the compiled function itself (the root), lambdas and comprehensions, methods of
Flax/Equinox/Keras modules (their module paths name them already), operators and attribute reads
on arrays (``x @ w``, ``x.T``), which are not call instructions in the user's code.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator

from . import _events, _frames, _monitor, _namestack
from ._record import Call, CallLog, user_code

__all__ = ["BACKENDS", "Call", "CallLog", "backend_for", "record_calls"]

BACKENDS = ("monitoring", "frames")
_ACTIVE = threading.local()  # a recording running on this thread (see record_calls)


def backend_for(asked: str | None = None) -> str:
    """The backend :func:`record_calls` uses: ``asked`` (or ``NBCOMPILE_CALL_CAPTURE``) where
    given and possible, else ``"monitoring"`` on Python 3.12+ with a free tool id, else
    ``"frames"``."""
    asked = asked or os.environ.get("NBCOMPILE_CALL_CAPTURE") or None
    if asked is not None and asked not in BACKENDS:
        raise ValueError(f"unknown call capture backend {asked!r}; known: {', '.join(BACKENDS)}")
    if asked == "frames" or not _monitor.available():
        return "frames"
    return "monitoring"


@contextlib.contextmanager
def record_calls(
    enabled: bool = True, timed: bool = False, backend: str | None = None
) -> Iterator[CallLog]:
    """Record the user's calls while the body traces (see the module docstring).

    The hooks never fail the trace: should finding the frames fail, recording stops (the calls
    seen so far stay, ``CallLog.complete`` is False) and JAX's own name stacks are used from
    then on. ``timed``: add up the seconds the equation-stamp hook took in ``CallLog.seconds``
    (for measuring the overhead; the scope hooks, far fewer, and the monitoring callbacks are
    not timed). ``backend``: ``"monitoring"`` or ``"frames"`` (default: :func:`backend_for`).
    A recording inside a recording on the same thread records nothing of its own (the outer
    one labels the calls): its log is empty, with ``backend="nested"``."""
    if not enabled:
        yield CallLog(backend="off")
        return
    if getattr(_ACTIVE, "on", False):
        yield CallLog(backend="nested")
        return
    root = sys._getframe(2)  # the frame that asked: the calls are those below it
    which = backend_for(backend)
    recorder = _frames.record
    if which == "monitoring":
        recorder = _events.record if _events.available() else _monitor.record
    _ACTIVE.on = True
    # the user's functions are traced afresh, and what this trace made of them is not left
    # to another trace (see _namestack.forget_traces)
    _namestack.forget_traces(user_code)
    try:
        try:
            context = recorder(root, timed)
            log = context.__enter__()
        except ValueError:  # the tool ids were taken since backend_for looked: the frames
            context = _frames.record(root, timed)
            log = context.__enter__()
        try:
            yield log
        except BaseException:
            if not context.__exit__(*sys.exc_info()):
                raise
        else:
            context.__exit__(None, None, None)
    finally:
        _ACTIVE.on = False
        _namestack.forget_traces(user_code)
