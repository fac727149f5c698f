"""Turn JAX's tracing/lowering/compile exceptions into short nbcompile errors.

Each error names the visible cell line where the problem is (the deepest traceback frame inside
the cell) and says what to do. The original exception is chained by the caller
(``raise translate(exc, ...) from exc``), so nothing JAX said is lost.
"""

from __future__ import annotations

import re
import traceback
from typing import Any

import jax

from ..capture.source import SourceInfo
from ..errors import CompileError, LowerError, NbcompileError, TraceError


def cell_line_of(exc: BaseException, source: SourceInfo) -> int | None:
    """The deepest traceback line of ``exc`` that lies in the cell (visible numbering)."""
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        visible = source.visible_line(frame.filename, frame.lineno)
        if visible is not None:
            line = visible
    if line is None and isinstance(exc, SyntaxError):
        line = source.visible_line(exc.filename, exc.lineno)
    return line


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


_ARG_PATH = re.compile(r"at path (?:args\[(\d+)\]|kwargs\['(\w+)'\]|(\w+))")
_TYPE_OF = re.compile(r"value is of type (<class '[^']+'>|\S+)")


def _param_name(fn: Any, index: int) -> str | None:
    import inspect

    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None
    return names[index] if index < len(names) else None


def _non_array_error(exc: BaseException, line: int | None, fn: Any) -> NbcompileError:
    text = str(exc)
    match = _ARG_PATH.search(text)
    name = None
    if match:
        index, keyword, plain = match.groups()
        name = _param_name(fn, int(index)) if index is not None else (keyword or plain)
    kind = _TYPE_OF.search(text)
    what = f"argument `{name}`" if name else "an example argument"
    of_type = f" ({kind.group(1)})" if kind else ""
    static = f"--static {name}" if name else "--static NAME"
    return TraceError(
        f"{what}{of_type} is not an array, so JAX cannot trace it",
        code="NBC203",
        line=line,
        hint=f"mark it static with `%%compile {static}` (it becomes part of the compiled "
        "program; each new value recompiles), or pass an array",
    )


def translate(
    exc: BaseException,
    stage: str,
    source: SourceInfo,
    *,
    fn: Any = None,
    jit_kwargs: dict[str, Any] | None = None,
) -> NbcompileError:
    """An nbcompile error for ``exc`` raised while running ``stage`` (trace/lower/compile)."""
    if isinstance(exc, NbcompileError):
        return exc
    line = cell_line_of(exc, source)
    code_line = f" `{source.line_text(line).strip()}`" if line else ""
    errors = jax.errors
    if isinstance(exc, errors.TracerBoolConversionError):
        return TraceError(
            f"Python `if`/`while`/`bool()` on a traced value{code_line}",
            code="NBC201",
            line=line,
            hint="use jnp.where(cond, a, b), jax.lax.cond or jax.lax.while_loop; or make the "
            "argument static with --static NAME if it is a configuration value",
        )
    if isinstance(exc, errors.NonConcreteBooleanIndexError):
        return TraceError(
            f"the shape of a result depends on array values{code_line}",
            code="NBC202",
            line=line,
            hint="compiled programs need static shapes: use jnp.where(mask, x, 0) or "
            "x[jnp.nonzero(mask, size=N)] with a fixed size",
        )
    if isinstance(
        exc,
        errors.TracerArrayConversionError
        | errors.TracerIntegerConversionError
        | errors.ConcretizationTypeError,
    ):
        shape_dependent = "shape" in str(exc).lower() and "concrete" in str(exc).lower()
        return TraceError(
            f"a traced value was used where a concrete value is needed{code_line}",
            code="NBC202" if shape_dependent else "NBC205",
            line=line,
            hint="keep the computation in jax.numpy (not numpy/int()/float()); for values that "
            "decide shapes or Python control flow, mark the argument static with --static NAME",
        )
    if isinstance(exc, errors.UnexpectedTracerError):
        return TraceError(
            f"a traced value escaped the function{code_line}",
            code="NBC204",
            line=line,
            hint="return values instead of storing them in globals or lists outside the function",
        )
    text = str(exc)
    if isinstance(exc, TypeError) and (
        "not a valid JAX type" in text or "as an abstract array" in text
    ):
        return _non_array_error(exc, line, fn)
    if isinstance(exc, TypeError) and "scalar-output" in text:
        return TraceError(
            f"--grad needs a function that returns a scalar: {_first_line(exc)}",
            code="NBC206",
            line=line,
            hint="return a scalar loss (e.g. jnp.mean(...)), or compile without --grad",
        )
    if stage == "lower":
        return LowerError(
            f"lowering to StableHLO failed: {_first_line(exc)}", line=line,
            hint="see the chained JAX error above",
        )
    if stage == "compile":
        return CompileError(
            f"XLA could not compile the program: {_first_line(exc)}", line=line,
            hint="see the chained XLA error above",
        )
    return TraceError(
        f"tracing failed: {type(exc).__name__}: {_first_line(exc)}",
        line=line,
        hint="fix that line; JAX's own message is shown above",
    )
