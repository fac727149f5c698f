"""The call recorder's core, shared by the backends: calls, labels, name stacks.

The Python 3.13 backend (``_events.py``) records with :meth:`Recorder.new_call` only (it keeps
the labels in JAX's context itself). The others (``_frames.py`` on Python 3.11, ``_monitor.py``
on 3.12) answer one question at
each moment JAX stamps an equation, pushes a scope or starts a nested program: which user frame
runs innermost and which library call it is making (``child``: the callee's frame; None where
it makes none the user named). :meth:`Recorder.at` turns that into the innermost *call*,
recording the calls new on the way (numbered per function under their caller: ``block#3``;
library calls named as written: ``gelu``); :func:`interleave` writes the running calls' labels
into JAX's name stack where they were entered. Those two feed the same frames to the same
code, so their output is the same.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

from .. import _compat
from . import _namestack
from ._callsite import call_name, calls_model, is_model_method, named
from ._listitems import ListItems
from .userfiles import is_user_code

__all__ = [
    "MAX_CALLS",
    "Call",
    "CallLog",
    "CallsCapped",
    "Recorder",
    "interleave",
    "same",
    "user_code",
]

_WALKED = 16  # frames where JAX's traceback stopped, remembered (nested traces run in them)
# the most calls one recording keeps (issue 41: a user function called 10^5 times while tracing).
# Past it the recording stops as a broken one does: the calls so far keep their labels, later
# equations keep JAX's own names, ``CallLog.capped`` says so. Each call recorded costs about
# 1.2 KB and 0.05 ms on top of the trace (measured, Python 3.13: 10^5 calls of a two-operation
# function, 604 MB and 18.1 s against 480 MB and 12.7 s without the capture; with this cap,
# 507 MB and 13.2 s).
MAX_CALLS = 20_000


class CallsCapped(Exception):
    """The recording reached :data:`MAX_CALLS` (caught by the hooks: it stops the recording)."""


@dataclass(eq=False, slots=True)
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
    wraps: Any = field(default=None, repr=False)  # the code a transformation's call runs
    # (Recorder.kinds_changed, its ancestors not transparent): see Recorder.visible
    chain: tuple[int, list[Call]] | None = field(default=None, repr=False)
    # (stack, barrier, name stack): the last answer of :func:`interleave` for this call
    memo: tuple[Any, Any, Any] | None = field(default=None, repr=False)


@dataclass
class CallLog:
    """What :func:`record_calls` saw: every call, and the seconds its hooks cost."""

    calls: list[Call] = field(default_factory=list)
    seconds: float = 0.0  # time in the hooks (measured with ``record_calls(timed=True)``)
    complete: bool = True  # False: recording stopped part-way (a frame could not be read)
    backend: str = "frames"  # "monitoring" (sys.monitoring, Python 3.12+), "frames", "off"
    capped: int = 0  # the calls kept where recording stopped at MAX_CALLS (0: it did not)

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


class Recorder:
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
        self.last: tuple[Any, Any, Call | None] = (None, None, None)  # frame, child, its call
        self.merged: dict[tuple[Any, int, int], tuple[Any, Any]] = {}  # -> (key's objects, stack)
        self.held_calls: tuple[Call, ...] = ()  # calls whose frames are held: those running now
        self.walked: dict[int, tuple[Any, Call | None]] = {}  # see _at: the last few
        # frame, child, stack, barrier, out: the last answer of the equation-stamp hook
        self.last_stack: tuple[Any, ...] = (None, None, (), None, None)
        self.kinds_changed = 0  # library calls turned transparent so far (see visible)
        self.broken: list[BaseException] = []  # what stopped the recording (the hooks never raise)
        self.items = ListItems()  # a model's list items called by a loop variable (see there)

    # what a backend's hooks call, given the innermost user frame and the frame it is calling

    def stack_for(self, frame: Any, child: Any, stack: tuple[Any, ...]) -> Any:
        """The name stack for an equation stamped now (None: JAX's own is right)."""
        barrier = self.barriers[-1] if self.barriers else None
        last = self.last_stack
        if (
            frame is last[0]
            and child is last[1]
            and barrier is last[3]
            and (stack is last[2] or same(stack, last[2]))
        ):
            return last[4]
        call = self.at(frame, child)
        shown = call.shown if call is not None else None
        if shown is None or (barrier is not None and id(shown) in barrier.ancestor_ids):
            # no label to write: no call shown, or all of them outside the nested program
            # running (inside a library call's own jit: most equations of a trace)
            out = None
        else:
            out = interleave(self, stack, shown)
        self.last_stack = (frame, child, stack, barrier, out)
        return out

    def pushed(self, elem: Any, frame: Any, child: Any) -> None:
        """A scope element pushed now: owned by the call running."""
        self.owner[id(elem)] = (elem, self.at(frame, child))

    def barrier_starts(self, frame: Any, child: Any) -> None:
        """A nested program starts its own name stack: its labels start below the call running."""
        self.barriers.append(self.at(frame, child))

    def barrier_ends(self) -> None:
        if self.barriers:
            self.barriers.pop()

    def finish(self) -> None:
        """Recording ends: say whether it was complete, and hold no frame."""
        self.log.complete = not self.broken
        for call in self.log.calls:
            call.frame = call.memo = call.chain = None

    def is_user(self, code: Any) -> bool:
        # keyed by the code object's id (hashing a code object hashes its bytecode); the value
        # holds the code, so the id stays its own while cached
        hit = self.user.get(id(code))
        if hit is None or hit[0] is not code:
            hit = self.user[id(code)] = (code, user_code(code))
            self.stops[id(code)] = hit[1]  # valid while ``user`` holds the code
            if not hit[1]:
                self.other.add(id(code))
        return hit[1]

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
        self.held_calls = running
        # both are paths from the root: past the first place they part, the held calls are in
        # another branch of the call tree than the running ones, so none of them is running.
        # They part near their ends (a sibling call, a return): look from there.
        k = min(len(held), len(running))
        while k and held[k - 1] is not running[k - 1]:
            k -= 1
        by_frame = self.by_frame
        for call in held[k:]:
            if call.frame is not None:
                by_frame.pop(id(call.frame), None)
                call.frame = None

    def _innermost(self, start: Any) -> Call | None:
        """The innermost call at ``start``, walking the frames up to the first known call and
        recording the new ones met on the way."""
        new: list[tuple[Any, Any]] = []  # (user frame, its callee frame), innermost first
        known: Call | None = None
        child, f = None, start
        user = self.user
        while f is not None and f is not self.root:
            code = f.f_code
            hit = user.get(id(code))
            if hit[1] if hit is not None and hit[0] is code else self.is_user(code):
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
        if lib is not None and lib.kind == "library" and any(named(f) for f, _c in new):
            lib.kind = "transparent"  # it called back into the user's code
            self.kinds_changed += 1
        return self._build(lib, new) or lib

    def _build(self, parent: Call | None, new: list[tuple[Any, Any]]) -> Call | None:
        current = parent
        for k in range(len(new) - 1, -1, -1):
            frame, callee = new[k]
            if frame is not None:
                current = self._user_call(frame, current)
            if callee is not None and not self.is_user(callee.f_code):
                below = any(named(f) for f, _c in new[:k])
                caller = frame if frame is not None else (current.frame if current else None)
                current = self._library_call(caller, callee, current, below)
        return current

    def _add(self, frame: Any, name: str, kind: str, parent: Call | None, **where: Any) -> Call:
        call = self.new_call(name, kind, parent, **where)
        call.frame = frame
        call.ancestors = (*(parent.ancestors if parent else ()), call)
        call.ancestor_ids = (parent.ancestor_ids if parent else frozenset()) | {id(call)}
        if kind != "transparent":  # a transparent call is never in a name stack
            call.scope = _compat.name_scope(call.label)
        self.by_frame[id(frame)] = call
        return call

    def new_call(
        self,
        name: str,
        kind: str,
        parent: Call | None,
        file: str | None = None,
        line: int | None = None,
    ) -> Call:
        """A call recorded: numbered under the innermost of its ancestors that is not
        transparent (``block#3``; a library call's second ``gelu#2``), and logged."""
        calls = self.log.calls
        if len(calls) >= MAX_CALLS:
            self.log.capped = len(calls)
            raise CallsCapped(f"{self.log.capped} calls recorded: recording stops")
        if kind == "transparent":
            call = Call(name, name, kind, parent, file, line)
            call.shown = parent.shown if parent is not None else None
        else:
            visible = parent
            while visible is not None and visible.kind == "transparent":
                visible = visible.parent
            key = (id(visible), name)
            counts = self.counts
            n = counts[key] = counts.get(key, 0) + 1
            # a call of the user's is numbered from the first (``layers_2 (act)``: a place,
            # not numbered); a library call from the second
            if n > 1 or (kind == "call" and not name.endswith(")")):
                call = Call(f"{name}#{n}", name, kind, parent, file, line)
            else:
                call = Call(name, name, kind, parent, file, line)
            call.shown = call
        calls.append(call)
        return call

    def _user_call(self, frame: Any, parent: Call | None) -> Call:
        code = frame.f_code
        name = _function_name(code)
        transparent = (
            parent is None  # the compiled function itself
            or name.startswith("<")
            or parent.wraps is code  # run by the transformation its call is (see below)
            or is_model_method(frame)
        )
        kind = "transparent" if transparent else "call"
        if not transparent and parent.frame is not None and frame.f_back is parent.frame:
            # a function of the user's in a model's list, run from the model's loop: its place
            # (``layers_2 (act)``), as a library function there is named (see _library_call)
            called = call_name(parent.frame)
            name = (self.items.name(parent.frame, called) if called else None) or name
        return self._add(frame, name, kind, parent, file=code.co_filename, line=code.co_firstlineno)

    def _library_call(self, caller: Any, callee: Any, parent: Call | None, wraps: bool) -> Call:
        hit = self.by_frame.get(id(callee))
        if hit is not None and hit.frame is callee:
            if wraps and hit.kind == "library":
                hit.kind = "transparent"
                self.kinds_changed += 1
            return hit
        # ``jax.checkpoint(layer)(w, x)``, ``jax.jit(layer)``, ``jax.vmap(layer)``, a custom_vjp
        # ``layer``: a call of the user's ``layer``, whether or not JAX runs its Python (the
        # first call traces it; later ones reuse that trace), so that each such call is one
        # group ``layer#k``; ``layer``'s own frame, where it runs, is this call
        fn = _namestack.transformed_function(callee)
        if fn is not None:
            code = fn.__code__
            name = _function_name(code)
            if not name.startswith("<") and self.is_user(code):
                call = self._add(
                    callee, name, "call", parent, file=code.co_filename, line=code.co_firstlineno
                )
                call.wraps = code
                return call
        name = call_name(caller) if caller is not None else None
        if name is None and parent is not None and caller is parent.frame:
            # not a call the user wrote (an operator, ``x.T``): nothing of its own to show, and
            # nothing worth keeping (the name lookup is cached): the caller's call is running
            return parent
        if name is None or wraps or calls_model(callee):
            return self._add(callee, name or callee.f_code.co_name, "transparent", parent)
        line = caller.f_lineno if caller is not None else None
        file = caller.f_code.co_filename if caller is not None else None
        # ``for layer in self.layers: x = layer(x)``: ``layers_2 (relu)``, not ``layer#2``
        name = (self.items.name(caller, name) if caller is not None else None) or name
        return self._add(callee, name, "library", parent, file=file, line=line)

    def visible(self, call: Call | None) -> list[Call]:
        """Non-transparent calls from the outermost to ``call``, inside the current barrier."""
        if call is None:
            return []
        chain = call.chain
        if chain is None or chain[0] != self.kinds_changed:  # a kind changed since: again
            chain = call.chain = (
                self.kinds_changed,
                [c for c in call.ancestors if c.kind != "transparent"],
            )
        labels = chain[1]
        outside = self.barriers[-1] if self.barriers else None
        if outside is None:
            return labels
        # the barrier's ancestors among them are a prefix (both are paths from the root)
        skip, k = outside.ancestor_ids, 0
        while k < len(labels) and id(labels[k]) in skip:
            k += 1
        return labels[k:]


_CODES: dict[int, tuple[Any, bool]] = {}  # id(code) -> (code, the user's): for every recording


def user_code(code: Any) -> bool:
    """:func:`~nbcompile.capture.userfiles.is_user_code`, remembered by the code object (the
    sys.monitoring backend asks this for every function that starts)."""
    hit = _CODES.get(id(code))
    if hit is not None and hit[0] is code:
        return hit[1]
    if len(_CODES) >= 1 << 16:
        _CODES.clear()
    found = is_user_code(code)
    _CODES[id(code)] = (code, found)  # holds the code: the id stays its own
    return found


def function_name(code: Any) -> str:
    """:func:`_function_name`, remembered by the code object."""
    hit = _NAMES.get(id(code))
    if hit is None or hit[0] is not code:
        if len(_NAMES) >= 4096:
            _NAMES.clear()
        hit = _NAMES[id(code)] = (code, _function_name(code))  # holds the code: its id
    return hit[1]


_NAMES: dict[int, tuple[Any, str]] = {}


def _function_name(code: Any) -> str:
    """A user function's name in labels: ``Block.__call__`` is ``Block``."""
    name = code.co_name
    if name == "__call__":
        name = code.co_qualname.rsplit(".", 2)[0].rsplit(".", 1)[-1]
    return name


def interleave(rec: Recorder, stack: tuple[Any, ...], call: Call | None) -> Any:
    """The name stack with the running calls' labels put where they were entered (a JAX
    ``NameStack``, made once per stack, call and barrier), or None: JAX's own is right.
    A stack is known by its elements, not the tuple: JAX makes a new tuple of the same elements
    for each equation in places (a linearized primitive's tangent runs under a fresh slice of
    the stack); the cache holds them, so their ids stay their own. The last answer for each
    call is kept on it (most calls meet one stack)."""
    barrier = rec.barriers[-1] if rec.barriers else None
    call = call.shown if call is not None else None  # transparent calls change no label
    if call is None:
        memo = None
    else:
        memo = call.memo
        if memo is not None and memo[1] is barrier and (memo[0] is stack or same(memo[0], stack)):
            return memo[2]
    key = (tuple(map(id, stack)), id(call), id(barrier))
    hit = rec.merged.get(key)
    if hit is not None and hit[0][1] is call and hit[0][2] is barrier:
        out = hit[1]
    else:
        elems = _merge(rec, stack, call)
        out = None if elems is None else _namestack.name_stack(elems)
        rec.merged[key] = ((stack, call, barrier), out)
    if call is not None:
        call.memo = (stack, barrier, out)
    return out


def same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """The same elements, in order (not merely equal ones: scopes are known by identity)."""
    return len(a) == len(b) and all(map(operator.is_, a, b))


def _merge(rec: Recorder, stack: tuple[Any, ...], call: Call | None) -> list[Any] | None:
    labels = rec.visible(call)
    if not labels:
        return None
    out: list[Any] = []
    placed, pos, n = 0, 0, len(labels)
    owners = rec.owner
    for elem in stack:
        owned = owners.get(id(elem))
        if owned is not None and owned[0] is elem:
            owner = owned[1]
            # the labels of the owner's ancestors: a prefix of the labels
            pos = 0
            if owner is not None:
                chain = owner.ancestor_ids
                while pos < n and id(labels[pos]) in chain:
                    pos += 1
        while placed < pos:
            out.append(labels[placed].scope)
            placed += 1
        out.append(elem)
    out.extend(c.scope for c in labels[placed:])
    return out
