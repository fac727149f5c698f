"""Turn JAX's tracing/lowering/compile exceptions into short nbcompile errors.

Each error names the visible cell line where the problem is (the deepest traceback frame inside
the cell) and says what to do. The original exception is chained by the caller
(``raise translate(exc, ...) from exc``), so nothing JAX said is lost.
"""

from __future__ import annotations

import re

import jax

from ..capture.cell import cell_line_of
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
        f"tracing failed: {type(exc).__name__}: {_first_line(exc)}",
        line=line,
        hint="fix that line; the original error is shown above",
    )
