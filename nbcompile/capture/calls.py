"""The user's function calls while tracing: exact call structure, carried in JAX's name stack.

While ``jitted.trace(...)`` runs, :func:`record_calls` watches the moments JAX stamps a new
equation with its source information (``source_info_util.current()``) and the moments a name
scope is pushed. At each, it looks at the live Python frames: every frame of a function from the
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

Not calls: the compiled function itself (the root), lambdas and comprehensions, methods of
Flax/Equinox/Keras modules (their module paths name them already), operators and attribute reads
on arrays (``x @ w``, ``x.T``), which are not call instructions in the user's code.
"""

from __future__ import annotations

import contextlib
import dis
import inspect
import itertools
import linecache
import operator
import re
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .. import _compat
from . import _namestack
from .userfiles import is_user_file

__all__ = ["Call", "CallLog", "record_calls"]

# CALL_KW: Python 3.13 calls with keyword arguments (``h.var(axis=-1)``); 3.11/3.12 use CALL
_CALL_OPS = frozenset(
    dis.opmap[n] for n in ("CALL", "CALL_KW", "CALL_FUNCTION_EX") if n in dis.opmap
)
_MODEL_LIBS = ("flax", "equinox", "keras")
_KEEP_FRAMES = False
_CACHE = dis.opmap.get("CACHE", 0)
_CLEAN = 1024  # chains of JAX's frames known to hold no user code (see _Recorder._inside_clean)
_CHAINS = 8  # of those, kept under one key (its ends and length)
_WALKED = 16  # frames where JAX's traceback stopped, remembered (nested traces run in them)
_NAME = re.compile(r"([A-Za-z_]\w*)\s*$")


@dataclass(eq=False)
class Call:
    """One call: ``label`` as it appears in name stacks (``block#3``, ``gelu``, ``gelu#2``)."""

    label: str
    name: str
    kind: str  # "call" (the user's function) | "library" | "transparent"
    parent: Call | None
    file: str | None = None
    line: int | None = None
    ancestors: tuple[Call, ...] = ()  # root first, self last
    ancestor_ids: frozenset[int] = frozenset()  # their ids
    shown: Call | None = field(default=None, repr=False)  # the innermost of them not transparent
    frame: Any = field(default=None, repr=False)  # keeps the frame alive: ids stay unique
    scope: Any = field(default=None, repr=False)  # its name stack element


@dataclass
class CallLog:
    """What :func:`record_calls` saw: every call, and the seconds its hooks cost."""

    calls: list[Call] = field(default_factory=list)
    seconds: float = 0.0  # time in the hooks (measured with ``record_calls(timed=True)``)
    complete: bool = True  # False: recording stopped part-way (a frame could not be read)

    @property
    def kinds(self) -> dict[str, str]:
        """Name-stack label -> ``"call"`` / ``"library"`` (labels are unique per parent only;
        the kind of a label does not depend on where it is)."""
        return {c.label: c.kind for c in self.calls if c.kind != "transparent"}

    def to_json(self) -> list[dict[str, Any]]:
        return [
            {
                "label": c.label,
                "kind": c.kind,
                "parent": c.parent.label if c.parent else None,
                "file": c.file,
                "line": c.line,
            }
            for c in self.calls
            if c.kind != "transparent"
        ]


def _callee_name(frame: Any) -> str | None:
    """The name the user wrote for what ``frame`` is calling now (None: not a call)."""
    return _callee(frame.f_code, frame.f_lasti)


def _callee(code: Any, lasti: int) -> str | None:
    """The name the user wrote for what ``code`` calls at ``lasti`` (None: not a call)."""
    key = (id(code), lasti)  # not the code itself: hashing a code object hashes its bytecode
    hit = _CALLEES.get(key)
    if hit is None or hit[0] is not code:
        if len(_CALLEES) >= 4096:
            _CALLEES.clear()
        hit = _CALLEES[key] = (code, _callee_at(code, lasti))  # holds the code: ids stay its own
    return hit[1]


_CALLEES: dict[tuple[int, int], tuple[Any, str | None]] = {}


def _callee_at(code: Any, lasti: int) -> str | None:
    raw = code.co_code
    while lasti > 0 and raw[lasti] == _CACHE:  # 3.11: f_lasti is the call's last cache entry
        lasti -= 2
    try:
        if raw[lasti] not in _CALL_OPS:
            return None
        line, end_line, col, end_col = next(itertools.islice(code.co_positions(), lasti // 2, None))
    except (IndexError, ValueError):
        return None
    if line is None or col is None or end_col is None:
        return None
    text = linecache.getline(code.co_filename, line)
    if end_line != line:
        text = text[col:]
        end = text.find("(")
        expr = text[:end] if end >= 0 else text
    else:
        expr = _strip_args(text[col:end_col])
    m = _NAME.search(expr or "")
    return m.group(1) if m else None


def _strip_args(expr: str) -> str:
    """``jax.nn.gelu(h)`` -> ``jax.nn.gelu``: the text before the call's own parentheses."""
    depth = 0
    for i in range(len(expr) - 1, -1, -1):
        ch = expr[i]
        if ch == ")":
            depth += 1
        elif ch == "(":
            depth -= 1
            if depth == 0:
                return expr[:i]
    return expr


def _named(frame: Any) -> bool:
    """A user frame that is a function of its own (not a lambda or comprehension)."""
    return frame is not None and not frame.f_code.co_name.startswith("<")


def _is_model_method(frame: Any) -> bool:
    """A method of a Flax/Equinox/Keras module."""
    code = frame.f_code
    if code.co_argcount and code.co_varnames[0] == "self":
        return _is_model(frame.f_locals.get("self"))
    return False


def _calls_model(frame: Any) -> bool:
    """A library frame that is a model's own call: a module method, or a wrapper given the
    module first (Keras wraps ``Layer.__call__`` in ``error_handler(*args, **kwargs)``)."""
    if _is_model_method(frame):
        return True
    code = frame.f_code
    if code.co_flags & inspect.CO_VARARGS and not (code.co_argcount or code.co_kwonlyargcount):
        args = frame.f_locals.get(code.co_varnames[0])
        return isinstance(args, tuple) and bool(args) and _is_model(args[0])
    return False


def _is_model(owner: Any) -> bool:
    for klass in type(owner).__mro__:
        module = getattr(klass, "__module__", "") or ""
        if module.split(".", 1)[0] in _MODEL_LIBS:
            return True
    return False


class _Recorder:
    def __init__(self, root: Any) -> None:
        self.root = root
        self.log = CallLog()
        self.by_frame: dict[int, Call] = {}
        self.counts: dict[tuple[int, str], int] = {}
        self.user: dict[int, tuple[Any, bool]] = {}  # id(code) -> (code, from the user's files)
        self.owner: dict[int, tuple[Any, Call | None]] = {}  # id(scope elem) -> (elem, call)
        self.barriers: list[Call | None] = []
        self.root_code = root.f_code if root is not None else None
        self.stops: dict[int, bool] = {id(self.root_code): True} if root is not None else {}
        self.other: set[int] = set()  # ids of codes neither the user's nor the root's (as stops)
        self.hot: tuple[Any, int, Any, int, bool] = (None, 1 << 30, None, -1, False)  # see frames
        self.clean: dict[tuple[int, int, int], list[list[Any]]] = {}  # see _inside_clean
        self.last: tuple[Any, Any, Call | None] = (None, None, None)  # frame, child, its call
        self.merged: dict[tuple[Any, int, int], tuple[Any, Any]] = {}  # -> (key's objects, stack)
        self.held_calls: tuple[Call, ...] = ()  # calls whose frames are held: those running now
        self.walked: dict[int, tuple[Any, Call | None]] = {}  # see _at: the last few
        # frame, child, stack, barrier, out: the last answer of the equation-stamp hook
        self.last_stack: tuple[Any, ...] = (None, None, (), None, None)

    def is_user(self, code: Any) -> bool:
        # keyed by the code object's id (hashing a code object hashes its bytecode); the value
        # holds the code, so the id stays its own while cached
        hit = self.user.get(id(code))
        if hit is None or hit[0] is not code:
            hit = self.user[id(code)] = (code, is_user_file(code.co_filename))
            self.stops[id(code)] = hit[1]  # valid while ``user`` holds the code
            if not hit[1]:
                self.other.add(id(code))
        return hit[1]

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
        # whether that is a call the user named
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
                        named = _callee(code, lasti) is not None
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
        """The frame ``codes[i]`` is calling, where that is a call the user wrote (``gelu(h)``,
        ``x.var()``: the library call it names); None for an operator (``x @ w``), which
        names nothing, or where ``codes[i]`` asked itself. ``own``, ``depth``: as for
        :meth:`frames`, which calls this (so ``codes[i - 1]`` is one frame further up)."""
        if i <= own + 1 or _callee(codes[i], lastis[i]) is None:
            return None
        return sys._getframe(i - own + depth)

    def at(self, frame: Any, child: Any) -> Call | None:
        """The innermost call running, given the frame :meth:`frames` found (``frame``; None:
        none) and the frame it is calling (``child``; None: it asked itself). Records the calls
        that are new on the way."""
        if frame is None:
            # not known which calls are running (JAX's traceback was not this stack's): no
            # labels, and nothing let go of; releasing here would take the frames of calls
            # still running, and their next equations would count as new calls (``block#11``)
            return None
        last_frame, last_child, last_found = self.last
        if frame is last_frame and child is last_child:  # nothing above them changed
            return last_found
        found = self._at(frame, child)
        self.last = (frame, child, found)
        if found is not last_found:  # the same call as before: the same frames are held
            self._release(found)
        return found

    def _at(self, frame: Any, child: Any) -> Call | None:
        if frame is self.root:
            return None
        hit = self.by_frame.get(id(frame))
        if hit is not None and hit.frame is frame:  # a known call: only its callee may be new
            if child is None:
                return hit
            lib = self.by_frame.get(id(child))
            if lib is not None and lib.frame is child:
                return lib
            return self._build(hit, [(None, child)])
        if not self.is_user(frame.f_code):
            # where JAX's traceback stopped (a nested trace began there: the frames above it
            # stay as they are while it runs, so one walk serves all its equations), or the
            # root's code in a frame that is not the root
            cached = self.walked.get(id(frame))
            if cached is not None and cached[0] is frame:
                return cached[1]
            found = self._innermost(frame)
            self.walked[id(frame)] = (frame, found)  # held: its id stays its own while cached
            while len(self.walked) > _WALKED:
                del self.walked[next(iter(self.walked))]
            return found
        return self._innermost(child if child is not None else frame)  # a new call

    def _release(self, found: Call | None) -> None:
        """Let go of the frames of calls that have returned: only the calls running now (the
        innermost's ancestors) can be met again, so a frame is held no longer than that."""
        running = found.ancestors if found is not None else ()
        held = self.held_calls
        # both are paths from the root: past the first place they part, the held calls are in
        # another branch of the call tree than the running ones, so none of them is running
        k, m = 0, min(len(held), len(running))
        while k < m and held[k] is running[k]:
            k += 1
        for call in held[k:]:
            if call.frame is not None:
                self.by_frame.pop(id(call.frame), None)
                call.frame = None
        self.held_calls = running

    def _innermost(self, start: Any) -> Call | None:
        """The innermost call at ``start``, walking the frames up to the first known call and
        recording the new ones met on the way."""
        new: list[tuple[Any, Any]] = []  # (user frame, its callee frame), innermost first
        known: Call | None = None
        child, f = None, start
        while f is not None and f is not self.root:
            if self.is_user(f.f_code):
                hit = self.by_frame.get(id(f))
                if hit is not None and hit.frame is f:
                    lib = self.by_frame.get(id(child)) if child is not None else None
                    if lib is not None and lib.frame is child:
                        return self._deepest(lib, new)
                    known = hit
                    new.append((None, child))  # the callee of a known call may be new
                    break
                new.append((f, child))
            child, f = f, f.f_back
        return self._build(known, new)

    def _deepest(self, lib: Call | None, new: list[tuple[Any, Any]]) -> Call | None:
        if lib is not None and lib.kind == "library" and any(_named(f) for f, _c in new):
            lib.kind = "transparent"  # it called back into the user's code
        return self._build(lib, new) or lib

    def _build(self, parent: Call | None, new: list[tuple[Any, Any]]) -> Call | None:
        current = parent
        for k in range(len(new) - 1, -1, -1):
            frame, callee = new[k]
            if frame is not None:
                current = self._user_call(frame, current)
            if callee is not None and not self.is_user(callee.f_code):
                below = any(_named(f) for f, _c in new[:k])
                caller = frame if frame is not None else (current.frame if current else None)
                current = self._library_call(caller, callee, current, below)
        return current

    def _add(self, frame: Any, name: str, kind: str, parent: Call | None, **where: Any) -> Call:
        visible = parent
        while visible is not None and visible.kind == "transparent":
            visible = visible.parent
        if kind != "transparent":
            key = (id(visible), name)
            n = self.counts[key] = self.counts.get(key, 0) + 1
            label = f"{name}#{n}" if kind == "call" else (name if n == 1 else f"{name}#{n}")
        else:
            label = name
        call = Call(label, name, kind, parent, frame=frame, **where)
        call.ancestors = (*(parent.ancestors if parent else ()), call)
        call.ancestor_ids = (parent.ancestor_ids if parent else frozenset()) | {id(call)}
        call.shown = call if kind != "transparent" else (parent.shown if parent else None)
        if kind != "transparent":  # a transparent call is never in a name stack
            call.scope = _compat.name_scope(label)
        self.by_frame[id(frame)] = call
        self.log.calls.append(call)
        return call

    def _user_call(self, frame: Any, parent: Call | None) -> Call:
        code = frame.f_code
        name = code.co_name
        if name == "__call__":
            name = code.co_qualname.rsplit(".", 2)[0].rsplit(".", 1)[-1]
        transparent = (
            parent is None  # the compiled function itself
            or name.startswith("<")
            or _is_model_method(frame)
        )
        kind = "transparent" if transparent else "call"
        return self._add(frame, name, kind, parent, file=code.co_filename, line=code.co_firstlineno)

    def _library_call(self, caller: Any, callee: Any, parent: Call | None, wraps: bool) -> Call:
        hit = self.by_frame.get(id(callee))
        if hit is not None and hit.frame is callee:
            if wraps and hit.kind == "library":
                hit.kind = "transparent"
            return hit
        name = _callee_name(caller) if caller is not None else None
        if name is None and parent is not None and caller is parent.frame:
            # not a call the user wrote (an operator, ``x.T``): nothing of its own to show, and
            # nothing worth keeping (the name lookup is cached): the caller's call is running
            return parent
        if name is None or wraps or _calls_model(callee):
            return self._add(callee, name or callee.f_code.co_name, "transparent", parent)
        line = caller.f_lineno if caller is not None else None
        file = caller.f_code.co_filename if caller is not None else None
        return self._add(callee, name, "library", parent, file=file, line=line)

    def visible(self, call: Call | None) -> list[Call]:
        """Non-transparent calls from the outermost to ``call``, inside the current barrier."""
        if call is None:
            return []
        outside = self.barriers[-1] if self.barriers else None
        skip = outside.ancestor_ids if outside is not None else frozenset()
        return [c for c in call.ancestors if c.kind != "transparent" and id(c) not in skip]


def _interleave(rec: _Recorder, stack: tuple[Any, ...], call: Call | None) -> Any:
    """The name stack with the running calls' labels put where they were entered (a JAX
    ``NameStack``, made once per stack, call and barrier), or None: JAX's own is right.
    A stack is known by its elements, not the tuple: JAX makes a new tuple of the same elements
    for each equation in places (a linearized primitive's tangent runs under a fresh slice of
    the stack); the cache holds them, so their ids stay their own."""
    barrier = rec.barriers[-1] if rec.barriers else None
    call = call.shown if call is not None else None  # transparent calls change no label
    key = (tuple(map(id, stack)), id(call), id(barrier))
    hit = rec.merged.get(key)
    if hit is not None and hit[0][1] is call and hit[0][2] is barrier:
        return hit[1]
    elems = _merge(rec, stack, call)
    out = None if elems is None else _namestack.name_stack(elems)
    rec.merged[key] = ((stack, call, barrier), out)
    return out


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """The same elements, in order (not merely equal ones: scopes are known by identity)."""
    return len(a) == len(b) and all(map(operator.is_, a, b))


def _merge(rec: _Recorder, stack: tuple[Any, ...], call: Call | None) -> list[Any] | None:
    labels = rec.visible(call)
    if not labels:
        return None
    out: list[Any] = []
    placed, pos = 0, 0
    owners = rec.owner
    for elem in stack:
        owned = owners.get(id(elem))
        if owned is not None and owned[0] is elem:
            owner = owned[1]
            chain = owner.ancestor_ids if owner is not None else frozenset()
            pos = sum(1 for c in labels if id(c) in chain)
        while placed < min(pos, len(labels)):
            out.append(labels[placed].scope)
            placed += 1
        out.append(elem)
    out.extend(c.scope for c in labels[placed:])
    return out


@contextlib.contextmanager
def record_calls(enabled: bool = True, timed: bool = False) -> Iterator[CallLog]:
    """Record the user's calls while the body traces (see the module docstring).

    The hooks never fail the trace: should reading the frames fail, recording stops (the calls
    seen so far stay) and JAX's own name stacks are used from then on. ``timed``: add up the
    seconds the equation-stamp hook took in ``CallLog.seconds`` (for measuring the overhead;
    the scope hooks, far fewer, are not timed)."""
    if not enabled:
        yield CallLog()
        return
    rec = _Recorder(sys._getframe(2))
    thread = threading.get_ident()
    broken: list[BaseException] = []
    get_ident, clock = threading.get_ident, time.perf_counter
    # the wrappers in ``_namestack`` call these directly: ``raw[0][own]`` is the wrapper, these
    # run one frame above it and ``rec.frames`` two (its ``depth``)

    def stack_for(raw: Any, own: int, stack: tuple[Any, ...]) -> Any:
        if broken or get_ident() != thread:
            return None
        t0 = clock() if timed else 0.0
        try:
            frame, child = rec.frames(raw, own, 2)
            barrier = rec.barriers[-1] if rec.barriers else None
            last = rec.last_stack
            if (
                frame is last[0]
                and child is last[1]
                and barrier is last[3]
                and (stack is last[2] or _same(stack, last[2]))
            ):
                return last[4]
            out = _interleave(rec, stack, rec.at(frame, child))
            rec.last_stack = (frame, child, stack, barrier, out)
            return out
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
            rec.owner[id(elem)] = (elem, rec.at(*rec.frames(raw, own, 2)))
        except Exception as exc:
            broken.append(exc)

    def on_set(raw: Any, own: int) -> None:
        if broken or get_ident() != thread:
            return
        try:
            if raw is None:
                if rec.barriers:
                    rec.barriers.pop()
            else:
                rec.barriers.append(rec.at(*rec.frames(raw, own, 2)))
        except Exception as exc:
            broken.append(exc)

    try:
        with _namestack.name_stack_hooks(stack_for, on_push, on_set):
            yield rec.log
    finally:
        rec.log.complete = not broken
        if not _KEEP_FRAMES:
            for call in rec.log.calls:
                call.frame = None
