"""The user's own names for a callable's parameters (for errors, hints, signatures, files).

One definition used everywhere nbcompile names an argument, so a message never says ``arg0`` or
``values`` where the user wrote ``params``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["call_arg_names", "param_names", "positional_names"]


def _signature(fn: Any) -> inspect.Signature | None:
    """``fn``'s signature, unwrapping jit objects and ``functools.wraps`` chains but stopping
    at an object that declares its own ``__signature__`` (adapters that rename arguments)."""
    target = fn
    if not isinstance(target, functools.partial):
        target = inspect.unwrap(target, stop=lambda f: hasattr(f, "__signature__"))
    try:
        return inspect.signature(target)
    except (TypeError, ValueError):
        return None


def positional_names(fn: Callable[..., Any]) -> list[str]:
    """Names of ``fn``'s positional parameters, in order (``*args`` and keyword-only excluded)."""
    sig = _signature(fn)
    if sig is None:
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in sig.parameters.values() if p.kind in kinds]


def param_names(fn: Callable[..., Any], count: int, *, fallback: str = "args[{i}]") -> list[str]:
    """The names of the first ``count`` positional arguments of a call of ``fn``.

    Positions beyond the named parameters (``*args``) get ``fallback.format(i=i)``, which reads
    as the user would index them (``args[2]``).
    """
    names = positional_names(fn)
    sig = _signature(fn)
    star = None
    if sig is not None:
        star = next(
            (p.name for p in sig.parameters.values() if p.kind is inspect.Parameter.VAR_POSITIONAL),
            None,
        )
    out = []
    for i in range(count):
        if i < len(names):
            out.append(names[i])
        elif star is not None:
            out.append(f"{star}[{i - len(names)}]")
        else:
            out.append(fallback.format(i=i))
    return out


def call_arg_names(call: Callable[..., Any] | None, args: tuple, kwargs: dict) -> list[str]:
    """The user's name of each positional argument of ``call(*args, **kwargs)``.

    Arguments gathered by ``*rest`` read ``rest[0]``, ``rest[1]``...; where the signature is
    unknown or does not bind, positions read ``args[i]``.
    """
    sig = _signature(call) if call is not None else None
    if sig is None:
        return [f"args[{i}]" for i in range(len(args))]
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError:
        return [f"args[{i}]" for i in range(len(args))]
    names: list[str] = []
    for name, value in bound.arguments.items():
        if len(names) >= len(args):
            break
        param = sig.parameters[name]
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            names += [f"{name}[{i}]" for i in range(len(value))]
        elif name not in kwargs:
            names.append(name)
    return (names + [f"args[{i}]" for i in range(len(names), len(args))])[: len(args)]
