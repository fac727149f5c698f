"""Turn JAX's tracing/lowering/compile exceptions into short nbcompile errors.

Each error names the visible cell line where the problem is (the deepest traceback frame inside
the cell) and says what to do. The original exception is chained by the caller
(``raise translate(exc, ...) from exc``), so nothing JAX said is lost.
"""

from __future__ import annotations

import re

import jax

from ..capture.cell import cell_line_of, deepest_user_frame
from ..capture.source import SourceInfo
from ..errors import CompileError, LowerError, NbcompileError, TraceError

__all__ = ["translate"]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


_ARG_PATH = re.compile(r"at path (?:args\[(\d+)\]|kwargs\['(\w+)'\]|(\w+))")
_TYPE_OF = re.compile(r"value is of type (<class '[^']+'>|\S+)")
_OUTPUT = re.compile(
    r"returned a value of type (<class '[^']+'>)(?: at output component (\[[^\]]*\]|\S+))?"
)


def _non_array_error(
    exc: BaseException, line: int | None, arg_names: list[str] | None
) -> NbcompileError:
    text = str(exc)
    match = _ARG_PATH.search(text)
    name = None
    if match:
        index, keyword, plain = match.groups()
        if index is not None:
            i = int(index)
            name = arg_names[i] if arg_names and i < len(arg_names) else None
        else:
            name = keyword or plain
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


def _output_error(match: re.Match[str], line: int | None) -> NbcompileError:
    kind = match.group(1).removeprefix("<class '").removesuffix("'>").rsplit(".", 1)[-1]
    where = match.group(2)
    place = f" (output {where})" if where else ""
    return TraceError(
        f"the function returns a {kind}{place}, which is "
        "not an array: a compiled program can only return arrays (pytrees of arrays)",
        code="NBC207",
        line=line,
        hint="return arrays only; for a model, return its parameters (eqx.filter_jit / "
        "nnx.jit handle model outputs) or compile the step without returning the model",
    )


def _where(exc: BaseException, source: SourceInfo, line: int | None) -> str:
    """`` `code` `` of the compiling cell's ``line``, with the deepest frame in the user's code
    when that lies elsewhere: a method of a model defined in an earlier cell (`` in In [3] line
    6 `code` ``) or in a user file."""
    here = f" `{source.line_text(line).strip()}`" if line else ""
    deepest = deepest_user_frame(exc, source)
    if deepest is None:
        return here
    location, text = deepest
    if line is not None and source.visible_line(location.file, location.line) == line:
        return here
    code = f" `{text}`" if text else ""
    return f"{here} in {location.label}{code}"


# JAX's messages for a traced value used where only a concrete one will do. A generic
# ConcretizationTypeError names the tracer ("traced array with shape float32[]"), so
# shape-dependence is read from the rest of the message: a size/shape argument, jnp.arange.
_SHAPE_OF_TRACERS = "Shapes must be 1D sequences of concrete values"
_TRACER_SHAPE = re.compile(r"traced array with shape \S+")
_SHAPE_WORDS = re.compile(r"\b(?:size|shape|arange|linspace)\b", re.IGNORECASE)


def _decides_shape(exc: BaseException) -> bool:
    """Whether a concrete-value error is about a shape (NBC202), not a conversion (NBC205)."""
    if not isinstance(exc, jax.errors.ConcretizationTypeError) or isinstance(
        exc, jax.errors.TracerArrayConversionError | jax.errors.TracerIntegerConversionError
    ):
        return False
    head = str(exc).split("The error occurred while tracing", 1)[0]
    return bool(_SHAPE_WORDS.search(_TRACER_SHAPE.sub("", head)))


def _shape_arguments(
    exc: BaseException, line: int | None, arg_names: list[str] | None
) -> list[str]:
    """Arguments of the traced function that are traced scalars used on the failing line:
    the values that decide a shape, which ``--static`` makes Python numbers again."""
    if not arg_names or line is None:
        return []
    tb = exc.__traceback__
    frame_locals: dict = {}
    while tb is not None:
        if tb.tb_lineno == line and arg_names[0] in tb.tb_frame.f_locals:
            frame_locals = tb.tb_frame.f_locals
        tb = tb.tb_next
    found = []
    for name in arg_names:
        value = frame_locals.get(name)
        if isinstance(value, jax.core.Tracer) and getattr(value, "ndim", None) == 0:
            found.append(name)
    return found


def _shape_error(
    exc: BaseException,
    source: SourceInfo,
    line: int | None,
    code_line: str,
    arg_names: list[str] | None,
) -> NbcompileError:
    text = source.line_text(line) if line else ""
    used = [n for n in _shape_arguments(exc, line, arg_names) if re.search(rf"\b{n}\b", text)]
    static = " ".join(f"--static {n}" for n in used) or "--static NAME"
    return TraceError(
        f"a shape depends on a traced value{code_line}",
        code="NBC202",
        line=line,
        hint=f"shapes must be known when compiling: mark the size argument static with "
        f"`%%compile {static}` (each new value recompiles), or use jnp.where(mask, x, 0) / "
        "jnp.nonzero(mask, size=N) with a fixed size",
    )


def translate(
    exc: BaseException,
    stage: str,
    source: SourceInfo,
    *,
    arg_names: list[str] | None = None,
    target: str | None = None,
) -> NbcompileError:
    """An nbcompile error for ``exc`` raised while running ``stage`` (trace/lower/compile)."""
    if isinstance(exc, NbcompileError):
        return exc
    line = cell_line_of(exc, source)
    code_line = _where(exc, source, line)
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
        if _decides_shape(exc):
            return _shape_error(exc, source, line, code_line, arg_names)
        return TraceError(
            f"a traced value was used where a concrete value is needed{code_line}",
            code="NBC205",
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
    if isinstance(exc, TypeError) and text.startswith(_SHAPE_OF_TRACERS):
        return _shape_error(exc, source, line, code_line, arg_names)
    output = _OUTPUT.search(text) if isinstance(exc, TypeError) else None
    if output is not None:
        return _output_error(output, line)
    if isinstance(exc, TypeError) and (
        "not a valid JAX type" in text or "as an abstract array" in text
    ):
        return _non_array_error(exc, line, arg_names)
    if isinstance(exc, TypeError) and "scalar-output" in text:
        return TraceError(
            f"--grad needs a function that returns a scalar: {_first_line(exc)}",
            code="NBC206",
            line=line,
            hint="return a scalar loss (e.g. jnp.mean(...)), or compile without --grad",
        )
    if isinstance(exc, ValueError) and "incompatible devices for jitted computation" in text:
        from ..errors import TargetError

        return TargetError(
            f"the function is bound to devices of this machine (a mesh of concrete devices "
            f"inside it, e.g. shard_map(mesh=...)), so it cannot be compiled for {target}",
            code="NBC600",
            line=line,
            hint="build it over the mesh's abstract form (shard_map(..., mesh=mesh.abstract_mesh)"
            " or jax.sharding.get_abstract_mesh()), or compile it for the devices it names",
        )
    where = f" for {target}" if target else ""
    if stage == "lower":
        return LowerError(
            f"lowering to StableHLO{where} failed: {_first_line(exc)}",
            line=line,
            hint="see the chained JAX error above",
        )
    if stage == "compile":
        return CompileError(
            f"XLA could not compile the program{where}: {_first_line(exc)}",
            line=line,
            hint="see the chained XLA error above",
        )
    return TraceError(
        f"tracing failed{code_line}: {type(exc).__name__}: {_first_line(exc)}",
        line=line,
        hint="fix that line; the original error is shown above",
    )
