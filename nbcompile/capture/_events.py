"""The call capture on Python 3.13+: the calls' labels kept in JAX's own name stack by events.

The backends before this one answer a question at every equation JAX stamps (which user frame
runs, which call it makes) and write the answer into that equation's name stack. This one
answers nothing per equation. ``sys.monitoring`` tells it when each call starts and ends; it
puts the call's element on JAX's name-stack context as the call starts and takes it off as the
call ends, as ``jax.named_scope`` does. JAX then stamps every equation with the calls' labels
itself, interleaved with its own scopes (transforms, nested programs) in the order they were
entered: what the other backends compute.

- A user function that starts (``PY_START``, for the user's code objects only; other code is
  answered ``DISABLE``) puts its element on; its ``PY_RETURN``, ``PY_YIELD`` or ``PY_UNWIND``
  takes it off. A generator's run from one resumption to its next yield is a call, as the
  frames the other backends read show it.
- A call the user's code makes into anything but a user function (``CALL``, a local event of
  the user's code objects) puts on an element for a *library call*. It ends at its own return:
  ``C_RETURN``/``C_RAISE`` in the caller for anything but a Python function, the callee's
  ``PY_RETURN``/``PY_UNWIND`` for one (those local events are set on the callee's code; for
  JAX's ``api_boundary`` wrapper, which returns everywhere, only while a user's call of it
  runs). A generator function called makes no call (it runs as it is iterated). A user
  function run right from the caller's frame while the library call goes on (``obj(x)`` where
  ``__call__`` is the user's; a generator resumed by ``sum()``) is a call of the caller's,
  beside the library call.
- An element is a placeholder until an equation is stamped inside its call, a scope pushed or a
  nested program started there (the moments the other backends record at): then the call is
  recorded, numbered and named by the recorder's rules (``block#3``, ``gelu``). It prints its
  label when JAX prints the name stack (lowering): nothing for a call never recorded, or one
  that turned out transparent (a library call the user's code ran under:
  ``jax.lax.scan(body, ...)``; its earlier equations lose its label too, where the other
  backends keep it on the equations stamped before the user's code ran).

Those moments are seen without replacing any function of JAX's: the context pushed is JAX's
own ``SourceInfo`` class, extended (``_Observed``), and JAX derives each equation's source info
and each scope's context from the context through its ``replace`` method. Once the call
running innermost is recorded, there is nothing more to see until another call starts (which
pushes an observed context of its own): JAX's plain ``SourceInfo``, with the same name stack,
takes the observed one's place, and JAX stamps the call's other equations and derives its
scopes at its own cost (most of a trace's ~9,000 stamps, GPT-2 small's train step). Where JAX
replays equations under their recorded source info (``jvp``/``transpose``), nothing is pushed
or recorded, as in the other backends. Only the tracing thread is watched.

One difference in what is recorded: a builtin that calls back library code several times
(``sum(arrays)`` adds with the arrays' ``__add__``) is one call here, as written; the backends
that read frames see each callback's frame as a call (``sum``, ``sum#2``, ...).

Python 3.12 fires no ``CALL`` event for ``f(*args)``, so this backend needs 3.13; 3.12 keeps
``_monitor.py``. Measured on the GPT-2 small train step: docs/benchmarks.md (capture row).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import types
from collections.abc import Iterator
from typing import Any

from jax._src import source_info_util as _siu

from . import _namestack, _record
from ._callsite import call_at, calls_callable_model, is_model_method, named
from ._monitor import _release_tool, _take_tool
from ._record import CallLog, Recorder

__all__ = ["available", "record"]

_FUNCTION, _METHOD = types.FunctionType, types.MethodType


def available() -> bool:
    """This backend's events exist: Python 3.13+ (a ``CALL`` event for ``f(*args)`` too)."""
    return sys.version_info >= (3, 13)


class _Observed(_siu.SourceInfo):
    """JAX's name-stack context while a user call runs: JAX's own ``SourceInfo``, which tells
    the recording each time JAX derives from it. JAX stamps an equation with
    ``context.replace(traceback=...)`` (``source_info_util.current``) and enters a scope or a
    nested program's name stack with ``context.replace(name_stack=...)``: the moments the
    other backends record at, with no hook of JAX's replaced. A context derived for a scope
    is observed as well; what an equation keeps is JAX's plain ``SourceInfo``."""

    __slots__ = ("events",)

    def __init__(self, traceback: Any, name_stack: Any, events: _Events) -> None:
        self.traceback, self.name_stack, self.events = traceback, name_stack, events

    def replace(self, *, traceback: Any = None, name_stack: Any = None) -> Any:
        ev = self.events
        # (JAX's ``SourceInfo``s are made without their Python ``__init__``: this runs at the
        # first stamp of every call)
        if traceback is not None:
            out = _new(_PLAIN)
            out.traceback = traceback
            if name_stack is not None:  # a replay: as JAX
                out.name_stack = name_stack
                return out
            # an equation stamped now: record the innermost call, and once it is recorded,
            # JAX's plain context takes this one's place (it has nothing more to tell until
            # another call starts, which pushes a context of its own): JAX stamps the call's
            # other equations at its own cost
            out.name_stack = name_stack = self.name_stack
            stack = ev.stack
            if stack and ev.live:
                top = stack[-1]
                if top.call is None:
                    ev.observe()
                if top.call is not None:
                    ctx = ev.context
                    if ctx.context is self:
                        plain = _new(_PLAIN)
                        plain.traceback, plain.name_stack = None, name_stack
                        ctx.context = plain
                        if top.pushed is self:
                            top.pushed = plain
            return out
        if name_stack is None:
            name_stack = self.name_stack
        if ev.live:  # a scope pushed, a nested program's own name stack
            ev.observe()
            stack = ev.stack
            if stack and stack[-1].call is not None:  # recorded: as above
                out = _new(_PLAIN)
                out.traceback, out.name_stack = None, name_stack
                return out
        derived = _new(_Observed)
        derived.traceback, derived.name_stack, derived.events = None, name_stack, ev
        return derived


_PLAIN = _siu.SourceInfo
_new = object.__new__
_NameStack = _siu.NameStack
_STACK_SLOT = _siu.NameStack.__dict__.get("stack")


# JAX's ``NameStack(elements)`` is a frozen dataclass: its ``__init__`` runs Python for each
# call pushed. Its field is a slot (JAX 0.10.2 to 0.12): set through the slot where it is one.
_SET_STACK = _STACK_SLOT.__set__ if type(_STACK_SLOT) is types.MemberDescriptorType else None


def _name_stack(elements: tuple[Any, ...]) -> Any:
    if _SET_STACK is None:
        return _siu.NameStack(elements)
    stack = _new(_siu.NameStack)
    _SET_STACK(stack, elements)
    return stack


get_ident = threading.get_ident  # (a module global: read at each moment JAX derives a context)


class _Node:
    """A call running on the tracing thread: a user frame, or a library call one is making.

    It is also the call's element in JAX's name stack (one object less per call): it prints
    the call's label once it is recorded (JAX prints name stacks at lowering), nothing while it
    is not, or when the call is transparent. ``name`` is what ``source_info_util.Scope`` has
    (read by ``_models_scopes.scope_path``). What it holds of the running program (frames, the
    objects called) it lets go of as the call ends."""

    __slots__ = (
        "arg0",
        "below",
        "call",
        "callee",
        "code",
        "fn",
        "frame",
        "held",
        "in_stack",
        "lasti",
        "lib",
        "parent",
        "pushed",
        "saved",
        "site",
    )

    def __init__(self, lib: bool, frame: Any, code: Any, parent: _Node | None) -> None:
        self.lib = lib
        self.frame, self.code, self.parent = frame, code, parent  # lib: the caller's frame
        self.lasti = -1  # lib: the caller's f_lasti while the call runs
        self.fn: Any = None  # lib: what is called, and its first argument
        self.callee: Any = None  # lib: the code object called where a Python function's
        self.held = False  # lib: its callee's return events are on for this call only
        self.arg0: Any = None
        self.site: Any = None  # lib: its call site, as in _Events.sites
        self.in_stack = False  # it is on the name stack (pushed as an element)
        self.saved: Any = None  # the context before the push, and the one pushed
        self.pushed: Any = None
        self.call: _record.Call | None = None  # once recorded
        self.below = False  # lib: a named user function ran under it

    @property
    def name(self) -> str:
        call = self.call
        return call.label if call is not None and call.kind != "transparent" else ""

    def wrap(self, stack: list[str]) -> None:  # as ``source_info_util.Scope.wrap``
        call = self.call
        if call is not None and call.kind != "transparent":
            stack.append(call.label)

    def __repr__(self) -> str:
        return f"Call({self.name!r})"


class _Events:
    """The running calls, kept by the events; records them as JAX stamps inside them."""

    def __init__(self, rec: Recorder, thread: int) -> None:
        self.rec, self.thread = rec, thread
        self.stack: list[_Node] = []
        self.last: _Node | None = None  # the node recorded at the last stamp
        self.live = True  # False once the recording ends or stops
        # (id(code), offset) -> (code, the name written for what the call there calls, its
        # line, code is a method's): filled as the call is made (its frame's line is the
        # call's); the code is held, so its id stays its own
        self.sites: dict[tuple[int, int], tuple[Any, str | None, int, bool]] = {}
        # id(code) -> (code, name in labels, a method's, a lambda's or comprehension's)
        self.functions: dict[int, tuple[Any, str, bool, bool]] = {}
        self.let_go: Any = None  # (set by _callbacks) a held callee's call ended
        self.holds: dict[int, list[Any]] = {}
        self.context = _siu._source_info_context

    # the context

    def push(self, node: _Node, element: bool = True, beside: _Node | None = None) -> None:
        """Observe the context while ``node`` runs, with its element on the name stack
        (``element``; the compiled function itself has none: it is never in a name stack).
        ``beside``: a library call ``node`` runs beside (not inside): its element is left
        out."""
        ctx = self.context
        now = ctx.context
        if now.traceback is not None:  # a replay: its equations keep their source info
            return
        base = now
        if beside is not None and beside.pushed is now:
            base = beside.saved
        stack = base.name_stack
        if element:
            node.in_stack = True
            # (``_name_stack`` inlined: a Python call per call pushed was 1.0 M of the 74 M
            # instructions the capture adds to GPT-2 small's trace, callgrind)
            if _SET_STACK is None:
                stack = _siu.NameStack((*stack.stack, node))
            else:
                elements, stack = (*stack.stack, node), _new(_NameStack)
                _SET_STACK(stack, elements)
        # (JAX's classes made without their Python ``__init__``: this runs for every call)
        pushed = _new(_Observed)
        pushed.traceback, pushed.name_stack, pushed.events = None, stack, self
        ctx.context = pushed
        node.saved, node.pushed = now, pushed

    def pop(self, node: _Node) -> None:
        """``node`` ends: the context it pushed goes, and it lets go of what it holds of the
        running program (frames, the objects called: a frame object still held at its return
        is copied). Calls end as they started, inside out, so the context is the one it
        pushed; where it is not (a scope entered in the call and never left), the element is
        taken off the context there is."""
        if node.held:
            node.held = False
            self.let_go(node.callee)
        node.frame = node.fn = node.arg0 = node.callee = None
        pushed = node.pushed
        if pushed is None:
            return
        ctx = self.context
        now = ctx.context
        if now is pushed:
            ctx.context = node.saved
        elif node.in_stack:
            stack = now.name_stack.stack
            if any(e is node for e in stack):
                kept = _name_stack(tuple(e for e in stack if e is not node))
                ctx.context = (
                    _Observed(None, kept, self)
                    if type(now) is _Observed
                    else _PLAIN(now.traceback, kept)
                )
        node.saved = node.pushed = None

    def observe(self) -> None:
        """JAX stamps an equation, pushes a scope or starts a nested program now: record the
        innermost call running (on the tracing thread). A failure stops the recording."""
        stack = self.stack
        if not stack:
            return
        top = stack[-1]
        if top is self.last or get_ident() != self.thread:
            return
        self.last = top
        if top.call is None:
            try:
                self.record(top)
            except Exception as exc:  # never the user's problem (CallsCapped too)
                self.stop(exc)

    def stop(self, exc: BaseException) -> None:
        """Stop recording: the calls running keep their elements (as JAX's context managers
        keep the contexts they restore) and end as they return; nothing new is pushed."""
        self.rec.broken.append(exc)
        self.live = False

    def end_calls_of(self, frame: Any) -> None:
        """``frame`` runs again: the library calls it was making have ended (each ends at its
        own return event; this is where one was missed)."""
        stack = self.stack
        while stack and stack[-1].lib and stack[-1].frame is frame:
            self.pop(stack.pop())

    # recording (at a stamp, a scope pushed, a nested program started)

    def record(self, node: _Node) -> None:
        """Record ``node``'s call and those of its running callers not recorded yet."""
        up = node.parent
        if up is None or up.call is not None:  # (most calls: their caller is recorded)
            parent = up.call if up is not None else None
            node.call = (
                self.library_call(node, parent) if node.lib else self.user_call(node, up, parent)
            )
            return
        chain = []
        n: _Node | None = node
        while n is not None and n.call is None:
            chain.append(n)
            n = n.parent
        for n in reversed(chain):
            up = n.parent
            parent = up.call if up is not None else None
            n.call = self.library_call(n, parent) if n.lib else self.user_call(n, up, parent)

    def user_call(self, node: _Node, up: _Node | None, parent: _record.Call | None) -> _record.Call:
        """The call a user function's frame is (``up``: the call running it)."""
        rec, frame, code = self.rec, node.frame, node.code
        info = self.functions.get(id(code))
        if info is None or info[0] is not code:
            name = _record.function_name(code)
            info = self.functions[id(code)] = (code, name, _method(code), name.startswith("<"))
        name = info[1]
        if (
            parent is None  # the compiled function itself
            or info[3]
            or parent.wraps is code  # run by the transformation its call is
            or (info[2] and is_model_method(frame))
        ):
            return rec.new_call(name, "transparent", parent, code.co_filename, code.co_firstlineno)
        if up is not None:
            # run right from its caller's frame: named as that call site names it (a model's
            # list item: ``layers_2 (act)``, only where the caller is a method), as the
            # recorder does
            caller = up.frame if not up.lib else _callee_frame(up, frame)
            if caller is not None and frame.f_back is caller and _method(caller.f_code):
                called = call_at(caller.f_code, caller.f_lasti)[0]
                if called:
                    name = rec.items.name(caller, called) or name
        return rec.new_call(name, "call", parent, code.co_filename, code.co_firstlineno)

    def library_call(self, node: _Node, parent: _record.Call | None) -> _record.Call:
        rec, caller = self.rec, node.frame
        fn = _namestack.transformed_callable(node.fn)
        if fn is not None:
            code = fn.__code__
            name = _record.function_name(code)
            if not name.startswith("<") and rec.is_user(code):
                call = rec.new_call(name, "call", parent, code.co_filename, code.co_firstlineno)
                call.wraps = code
                return call
        _code, name, line, method = node.site  # (set as the call was made: ``called``)
        if name is None or node.below or calls_callable_model(node.fn, node.arg0):
            label = name or getattr(node.fn, "__name__", None) or type(node.fn).__name__
            return rec.new_call(label, "transparent", parent)
        if method:
            name = rec.items.name(caller, name) or name
        return rec.new_call(name, "library", parent, node.code.co_filename, line)

    def site(self, code: Any, lasti: int, frame: Any) -> tuple[Any, str | None, int, bool]:
        """The call at ``lasti`` in ``code``, which ``frame`` runs now: (code, the name
        written, the line, ``code`` is a method's); kept per call site."""
        hit = self.sites.get((id(code), lasti))
        if hit is None or hit[0] is not code:
            hit = self.sites[(id(code), lasti)] = (
                code,
                call_at(code, lasti)[0],
                frame.f_lineno,
                _method(code),
            )
        return hit


def _method(code: Any) -> bool:
    """A method's code (its first argument ``self``): where ``ListItems`` may name a call."""
    return bool(code.co_argcount) and code.co_varnames[0] == "self"


def _callee_frame(lib: _Node, start: Any) -> Any:
    """The first frame of the library call ``lib`` (the one its caller's frame called), found
    above ``start``, a frame running under it; None where the walk does not meet the caller."""
    f, below = start, None
    caller = lib.frame
    while f is not None:
        if f is caller:
            return below
        below, f = f, f.f_back
    return None


@contextlib.contextmanager
def record(root: Any, timed: bool = False) -> Iterator[CallLog]:
    """Record the user's calls below ``root`` while the body traces (see ``capture/calls.py``).
    Raises ``ValueError`` before anything changed when no tool id is free."""
    mon = sys.monitoring
    tool = _take_tool(mon)
    rec = Recorder(root)
    rec.log.backend = "monitoring"
    thread = threading.get_ident()
    ev = _Events(rec, thread)
    armed: dict[int, Any] = {}
    callbacks = _callbacks(ev, mon, tool, armed, timed)
    entry = ev.context.context  # JAX's context as the recording starts
    try:
        for event, fn in callbacks.items():
            mon.register_callback(tool, event, fn)
        events = mon.events
        mon.set_events(tool, events.PY_START | events.PY_UNWIND | events.PY_THROW)
        yield rec.log
    finally:
        ev.live = False
        armed.update((k, held[0]) for k, held in ev.holds.items())
        _release_tool(mon, tool, armed, callbacks)
        # what is still pushed (the recording ends inside a call: not the trace's way) goes
        for node in reversed(ev.stack):
            ev.pop(node)
        ev.stack.clear()
        ev.last = None
        now = ev.context.context
        if now is not entry and (  # never left behind (a context left unbalanced by a
            type(now) is _Observed  # failure): JAX's, as found
            or any(type(e) is _Node for e in now.name_stack.stack)
        ):
            ev.context.context = entry
        rec.finish()


def _callbacks(
    ev: _Events, mon: Any, tool: int, armed: dict[int, Any], timed: bool
) -> dict[int, Any]:
    """sys.monitoring's callbacks: keep ``ev.stack`` and push/pop the elements. Cheap and never
    raising. A failure stops the recording (``_Events.stop``): nothing is pushed after it, and
    the calls running still end as they return; a failure in ending one takes every element
    off at once."""
    stack, rec, sites = ev.stack, ev.rec, ev.sites
    thread = ev.thread
    codes, user_code = _record._CODES, _record.user_code
    getframe = sys._getframe
    push, pop, end_calls_of = ev.push, ev.pop, ev.end_calls_of
    events = mon.events
    disable = mon.DISABLE
    returns = events.PY_RETURN
    local = returns | events.PY_YIELD | events.PY_RESUME | events.CALL
    local |= events.C_RETURN | events.C_RAISE  # (set together only)
    if timed:
        clock, log, observe = time.perf_counter, rec.log, ev.observe

        def timed_observe() -> None:
            t0 = clock()
            try:
                observe()
            finally:
                log.seconds += clock() - t0

        ev.observe = timed_observe  # type: ignore[method-assign]

    holds: dict[int, list[Any]] = {}  # id(code) -> [code, calls running]

    def hold(code: Any) -> None:
        held = holds.get(id(code))
        if held is None:
            held = holds[id(code)] = [code, 0]
        if not held[1]:
            mon.set_local_events(tool, code, returns)
        held[1] += 1

    def let_go(code: Any) -> None:
        held = holds.get(id(code))
        if held is not None and held[1] > 0:
            held[1] -= 1
            if not held[1]:
                mon.set_local_events(tool, code, 0)

    ev.let_go, ev.holds = let_go, holds

    def dead(exc: BaseException) -> None:
        ev.stop(exc)
        for node in reversed(stack):
            pop(node)
        stack.clear()

    def start(code: Any, offset: int) -> Any:  # PY_START (global), PY_RESUME (local)
        hit = codes.get(id(code))
        if not (hit[1] if hit is not None and hit[0] is code else user_code(code)):
            return disable
        if not ev.live or get_ident() != thread:
            return None
        try:
            if id(code) not in armed:
                armed[id(code)] = code
                mon.set_local_events(tool, code, local)
            frame = getframe(1)
            parent = stack[-1] if stack else None
            beside = None
            if parent is not None and parent.lib:
                if frame.f_back is parent.frame:
                    # run right from the caller's frame, with no frame of the library's
                    # between (``obj(x)`` where ``__call__`` is the user's, a generator of the
                    # user's resumed by ``sum()``): a call of the caller's, beside the library
                    # call, which goes on
                    beside, parent = parent, parent.parent
                elif named(frame):  # a library call that runs the user's code
                    parent.below = True
                    if parent.call is not None and parent.call.kind == "library":
                        parent.call.kind = "transparent"
                        rec.kinds_changed += 1
            node = _Node(False, frame, code, parent)
            stack.append(node)
            # the compiled function itself (no call above it) is never in a name stack
            push(node, node.parent is not None, beside)
        except Exception as exc:  # never the user's problem: stop recording
            ev.stop(exc)
        return None

    def ended(frame: Any) -> None:
        # (a generator of the user's that yields ends its call: resumed, it is a new one, as
        # the other backends see it)
        top = stack[-1]
        if top.lib and top.frame is frame:  # (where a library call's end was missed)
            end_calls_of(frame)
            if not stack:
                return
            top = stack[-1]
        if top.frame is frame and not top.lib:
            pop(stack.pop())

    def callee_ended(code: Any) -> bool:
        """A library call's Python function returns or raises: it ends, where it is the one
        the innermost call is making (its code runs elsewhere too)."""
        top = stack[-1]
        if top.callee is code and top.lib and getframe(2).f_back is top.frame:
            pop(stack.pop())
            return True
        return False

    def returned(code: Any, offset: int, value: Any) -> None:  # PY_RETURN (local)
        # the user's functions, and the Python functions library calls call (armed in
        # ``called``: they return elsewhere too, most of the time)
        if not stack:
            return
        if stack[-1].callee is code:
            if get_ident() == thread:
                try:
                    callee_ended(code)
                except Exception as exc:
                    dead(exc)
            return
        hit = codes.get(id(code))
        if (hit[1] if hit is not None and hit[0] is code else user_code(code)) and (
            get_ident() == thread
        ):
            try:
                ended(getframe(1))
            except Exception as exc:
                dead(exc)

    def yielded(code: Any, offset: int, value: Any) -> None:  # PY_YIELD (local)
        if stack and get_ident() == thread:
            try:
                ended(getframe(1))
            except Exception as exc:
                dead(exc)

    def unwind(code: Any, offset: int, exc: BaseException) -> None:  # PY_UNWIND (global)
        # every frame an exception leaves (it cannot be disabled): the user's, and the first
        # frame of a library call a user frame is making
        if not stack or get_ident() != thread:
            return
        try:
            if stack[-1].callee is code and callee_ended(code):
                return
            hit = codes.get(id(code))
            if hit[1] if hit is not None and hit[0] is code else user_code(code):
                ended(getframe(1))
        except Exception as err:
            dead(err)

    def c_returned(code: Any, offset: int, fn: Any, arg0: Any) -> None:  # C_RETURN, C_RAISE
        # a call of anything but a Python function returned (or raised) in a user frame
        if stack and get_ident() == thread:
            top = stack[-1]
            if top.lib and top.lasti == offset and top.code is code:
                try:
                    pop(stack.pop())
                except Exception as exc:
                    dead(exc)

    def thrown(code: Any, offset: int, exc: BaseException) -> None:  # PY_THROW (global)
        hit = codes.get(id(code))
        if hit[1] if hit is not None and hit[0] is code else user_code(code):
            start(code, offset)

    def called(code: Any, offset: int, fn: Any, arg0: Any) -> None:  # CALL (local)
        if not ev.live or not stack or get_ident() != thread:
            return
        try:
            frame = getframe(1)
            top = stack[-1]
            if top.lib and top.frame is frame:  # its last call has ended: it runs again
                end_calls_of(frame)
                top = stack[-1]
            if top.frame is not frame:  # not a frame the stack holds (not below the root)
                return
            kind = type(fn)
            inner = fn.__func__ if kind is _METHOD else fn
            callee = inner.__code__ if type(inner) is _FUNCTION else None
            if callee is not None:
                hit = codes.get(id(callee))
                if hit[1] if hit is not None and hit[0] is callee else user_code(callee):
                    return  # a user function: its own start makes its call
                if callee.co_flags & _GENERATOR:
                    return  # runs as it is iterated, not in this call
            site = sites.get((id(code), offset))
            if site is None or site[0] is not code:
                site = ev.site(code, offset, frame)
            if site[1] is None and _namestack.transformed_callable(fn) is None:
                return  # names nothing (``fns[0](x)``): its equations are the caller's
            node = _Node(True, frame, code, top)
            node.lasti, node.fn, node.arg0, node.callee, node.site = offset, fn, arg0, callee, site
            if callee is not None and id(callee) not in armed:
                # a Python function: its return ends the call (anything else's: C_RETURN)
                if callee.co_name in _EVERYWHERE:
                    hold(callee)
                    node.held = True
                else:
                    armed[id(callee)] = callee
                    mon.set_local_events(tool, callee, returns)
            stack.append(node)
            push(node)
        except Exception as exc:
            ev.stop(exc)

    return {
        events.PY_START: start,
        events.PY_RESUME: start,
        events.PY_RETURN: returned,
        events.PY_YIELD: yielded,
        events.PY_UNWIND: unwind,
        events.PY_THROW: thrown,
        events.CALL: called,
        events.C_RETURN: c_returned,
        events.C_RAISE: c_returned,
    }


_GENERATOR = 0x20 | 0x100 | 0x200  # CO_GENERATOR, CO_COROUTINE, CO_ASYNC_GENERATOR
# library functions that return all the time elsewhere while a user's call of them runs:
# JAX's ``api_boundary`` wrapper of every transformation (``jax.value_and_grad(loss)(...)``
# runs through it, and so does each of JAX's own jits inside). Their return events are on only
# while a call of them from the user's code runs (2,194 returns a GPT-2 small train step's
# trace made there, 1 of them the user's call's, when they stayed on).
_EVERYWHERE = frozenset({"reraise_with_filtered_traceback"})
