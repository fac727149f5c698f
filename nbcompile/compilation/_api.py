"""``nbcompile.compile`` and ``nbcompile.compare``: the library entry points."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .._compat import cell_files
from ..capture.models import adapt
from ..capture.source import SourceInfo, source_of_function
from ..pipeline import CompileRequest, build_program
from ..stages import Progress
from ._core import Compilation

__all__ = ["_as_argnums", "compare", "compile"]


def _as_argnums(grad: Any) -> tuple[int, ...] | None:
    if grad is None or grad is False:
        return None
    if grad is True:
        return (0,)
    if isinstance(grad, int):
        return (grad,)
    return tuple(int(g) for g in grad)


def compile(
    fn: Callable[..., Any],
    *example_args: Any,
    backend: str | None = None,
    grad: int | Sequence[int] | bool | None = None,
    example_kwargs: dict[str, Any] | None = None,
    source: SourceInfo | None = None,
    name: str | None = None,
    progress: Progress | None = None,
    compiler_options: dict[str, Any] | None = None,
    topology: str | None = None,
    gpu: str | None = None,
    mesh: str | None = None,
    shard: dict[str, str] | None = None,
    passes: bool = False,
    **jit_kwargs: Any,
) -> Compilation:
    """Trace, lower and compile ``fn(*example_args)`` and return the :class:`Compilation`.

    ``grad`` (argnums, or True for 0 / a model's parameters) also compiles
    ``jax.value_and_grad(fn, argnums)`` for the Gradient view. ``jit_kwargs``
    (``static_argnames``, ``donate_argnames``, ...) go to ``jax.jit`` and take the names you
    wrote. ``backend`` (``cpu``/``gpu``/``tpu``), ``topology`` (``v5e:2x2``), ``gpu``
    (``h100``), ``mesh`` (``4x2``) and ``shard`` (``{"x": "data,None"}``) pick the hardware;
    absent devices are compiled for without them where the compiler is installed.
    Example arguments may be ``jax.ShapeDtypeStruct``\\ s: compile-only planning.
    ``passes=True`` (``%%compile --passes``) has the compile write XLA's dump, so ``c.passes``,
    ``c.kernel_code``, ``c.compile_time`` and the report's Passes tab need no second compile.
    """
    __tracebackhide__ = True
    adapted = adapt(fn, example_args, example_kwargs or {})
    request = CompileRequest(
        backend=backend,
        grad=_as_argnums(grad),
        grad_is_default=grad is True,
        topology=topology,
        gpu=gpu,
        mesh=mesh,
        shard=dict(shard or {}),
        jit_kwargs=dict(jit_kwargs),
        compiler_options=dict(compiler_options or {}),
    )
    program = build_program(
        adapted,
        request,
        source=source or source_of_function(adapted.fn, cells=cell_files()),
        name=name,
        progress=progress,
        passes=passes,
    )
    comp = Compilation(program, adapted)
    if passes and program.metal is not None:
        comp.run_passes()  # as --passes: the report carries the Passes tab (no compile here)
    return comp


def compare(*compilations: Compilation) -> Any:
    """The same model compiled for several targets: a side-by-side table (``.text()``) and,
    displayed, the visual diff of the first compilation against each other one."""
    from ..comparison import compare_compilations
    from ..targets import compare as compare_rows

    rows = []
    for c in compilations:
        label = c.target.label.upper().replace("CUDA", "GPU")
        rows.append((label, c.hlo, c.cost, c.memory))
    return compare_compilations(compare_rows(rows), *compilations)
