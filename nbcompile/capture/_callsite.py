"""What a call site in the user's code names, read from its bytecode and source (both backends).

``callee(code, lasti)`` answers the name the user wrote for what the instruction at ``lasti``
calls (``jax.nn.gelu(h)`` -> ``gelu``, ``h.var(axis=-1)`` -> ``var``), None where that
instruction is not a call (an operator such as ``x @ w``, an attribute read ``x.T``) or names
nothing (``fns[0](x)``, ``jax.checkpoint(layer)(w, x)``). The rest tells model methods
(Flax/Equinox/Keras, named by their module paths already) from other library code.
"""

from __future__ import annotations

import dis
import inspect
import itertools
import linecache
import re
import types
from typing import Any

__all__ = [
    "CALL_EX",
    "call_at",
    "call_name",
    "callee",
    "calls_callable_model",
    "calls_model",
    "is_model",
    "is_model_method",
    "named",
]

# CALL_KW: Python 3.13 calls with keyword arguments (``h.var(axis=-1)``); 3.11/3.12 use CALL
CALL_OPS = _CALL_OPS = frozenset(
    dis.opmap[n] for n in ("CALL", "CALL_KW", "CALL_FUNCTION_EX") if n in dis.opmap
)
CALL_EX = dis.opmap["CALL_FUNCTION_EX"]  # ``f(*args)``: Python 3.12 fires no CALL event for it
_CACHE = dis.opmap.get("CACHE", 0)
_MODEL_LIBS = ("flax", "equinox", "keras")
_NAME = re.compile(r"([A-Za-z_]\w*)\s*$")
_CALLEES: dict[tuple[int, int], tuple[Any, str | None, int]] = {}


def call_name(frame: Any) -> str | None:
    """The name the user wrote for what ``frame`` is calling now (None: not a call)."""
    return call_at(frame.f_code, frame.f_lasti)[0]


def is_call(code: Any, lasti: int) -> bool:
    """Whether the instruction at ``lasti`` calls something (named or not: ``fns[0](x)``,
    ``jax.checkpoint(layer)(w, x)``): the frame it runs may be a call of its own."""
    return call_at(code, lasti)[1] in _CALL_OPS


def callee(code: Any, lasti: int) -> str | None:
    """The name the user wrote for what ``code`` calls at ``lasti`` (None: not a call)."""
    return call_at(code, lasti)[0]


def in_loop(code: Any, offset: int) -> bool:
    """Whether the instruction at ``offset`` lies inside a loop of ``code`` (between a backward
    jump's target and the jump: ``for``/``while``, comprehensions inlined on 3.12+): the only
    instructions a frame runs more than once."""
    hit = _LOOPS.get(id(code))
    if hit is None or hit[0] is not code:
        if len(_LOOPS) >= 4096:
            _LOOPS.clear()
        spans = tuple(
            (ins.argval, ins.offset)
            for ins in dis.get_instructions(code)
            if ins.opcode in _JUMPS and isinstance(ins.argval, int) and ins.argval <= ins.offset
        )
        hit = _LOOPS[id(code)] = (code, spans)  # holds the code: the id stays its own
    return any(start <= offset <= end for start, end in hit[1])


_LOOPS: dict[int, tuple[Any, tuple[tuple[int, int], ...]]] = {}
_JUMPS = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)


def call_at(code: Any, lasti: int) -> tuple[str | None, int]:
    """(:func:`callee`, the opcode of the instruction at ``lasti``: -1 where none)."""
    key = (id(code), lasti)  # not the code itself: hashing a code object hashes its bytecode
    hit = _CALLEES.get(key)
    if hit is None or hit[0] is not code:
        if len(_CALLEES) >= 4096:
            _CALLEES.clear()
        # holds the code: ids stay its own
        hit = _CALLEES[key] = (code, *_callee_at(code, lasti))
    return hit[1], hit[2]


def _callee_at(code: Any, lasti: int) -> tuple[str | None, int]:
    raw = code.co_code
    # 3.11 and 3.12: while a call runs, f_lasti is the call's last cache entry; 3.13: the call
    while lasti > 0 and lasti < len(raw) and raw[lasti] == _CACHE:
        lasti -= 2
    try:
        op = raw[lasti]
        if op not in _CALL_OPS:
            return None, op
        line, end_line, col, end_col = next(itertools.islice(code.co_positions(), lasti // 2, None))
    except (IndexError, ValueError):
        return None, -1
    if line is None or col is None or end_col is None:
        return None, op
    text = linecache.getline(code.co_filename, line)
    if end_line != line:
        text = text[col:]
        end = text.find("(")
        expr = text[:end] if end >= 0 else text
    else:
        expr = _strip_args(text[col:end_col])
    m = _NAME.search(expr or "")
    name = m.group(1) if m else None
    # a name the code loads (a global, attribute, local or closure variable), or the text is
    # not this code's: ``exec``'d strings share the name ``<string>`` with ``python -c``'s
    # source, which Python 3.13 keeps in linecache
    if name is not None and name not in _names(code):
        return None, op
    return name, op


def _names(code: Any) -> frozenset[str]:
    return frozenset(code.co_names + code.co_varnames + code.co_freevars + code.co_cellvars)


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


def named(frame: Any) -> bool:
    """A user frame that is a function of its own (not a lambda or comprehension)."""
    return frame is not None and not frame.f_code.co_name.startswith("<")


def is_model_method(frame: Any) -> bool:
    """A method of a Flax/Equinox/Keras module."""
    code = frame.f_code
    if code.co_argcount and code.co_varnames[0] == "self":
        return is_model(frame.f_locals.get("self"))
    return False


def calls_model(frame: Any) -> bool:
    """A library frame that is a model's own call: a module method, or a wrapper given the
    module first (Keras wraps ``Layer.__call__`` in ``error_handler(*args, **kwargs)``)."""
    if is_model_method(frame):
        return True
    code = frame.f_code
    if code.co_flags & inspect.CO_VARARGS and not (code.co_argcount or code.co_kwonlyargcount):
        args = frame.f_locals.get(code.co_varnames[0])
        return isinstance(args, tuple) and bool(args) and is_model(args[0])
    return False


def calls_callable_model(fn: Any, arg0: Any) -> bool:
    """:func:`calls_model` told from what a call calls and its first argument, before the
    callee runs (the ``sys.monitoring`` ``CALL`` event): a module called (its own
    ``__call__``), a module's method, or a function given the module first as ``self`` or as
    the first of ``*args`` only."""
    if is_model(fn):
        return True
    kind = type(fn)
    if kind is types.MethodType:
        fn, arg0 = fn.__func__, fn.__self__
        kind = type(fn)
    if kind is not types.FunctionType:
        return False
    code = fn.__code__
    if code.co_argcount and code.co_varnames[0] == "self":
        return is_model(arg0)
    if code.co_flags & inspect.CO_VARARGS and not (code.co_argcount or code.co_kwonlyargcount):
        return is_model(arg0)
    return False


def is_model(owner: Any) -> bool:
    kind = type(owner)
    hit = _MODEL_TYPES.get(kind)
    if hit is None:
        if len(_MODEL_TYPES) >= 4096:
            _MODEL_TYPES.clear()
        hit = _MODEL_TYPES[kind] = any(
            (getattr(klass, "__module__", "") or "").split(".", 1)[0] in _MODEL_LIBS
            for klass in kind.__mro__
        )
    return hit


# type -> whether a model library's (asked for each library call's ``self``: tracers mostly);
# holds the types, so a key is never another type's
_MODEL_TYPES: dict[type, bool] = {}
