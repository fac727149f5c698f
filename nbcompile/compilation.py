"""``nbcompile.compile`` and the ``Compilation`` it returns.

A Compilation holds every artifact of one compile (the jit object, jaxpr, StableHLO, optimised
HLO, costs, timings) and computes the analyses (graph, fusions, folded constants, gradient) on
first use. It renders itself: ``text/plain`` summary, self-contained HTML fallback, and the
interactive widget where a widget manager runs.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax

from .analysis.artifacts import Artifacts
from .capture.source import SourceInfo, source_of_function
from .stages import Progress, Stages, make_jitted, recompile_with_metadata, run_stages

__all__ = ["Compilation", "compare", "compile", "describe_args"]


def _short_dtype(dtype: Any) -> str:
    name = str(dtype)
    for long, short in (("float", "f"), ("bfloat", "bf"), ("uint", "u"), ("int", "s"),
                        ("complex", "c")):
        if name.startswith(long):
            return short + name[len(long):]
    return "pred" if name == "bool" else name


def describe_value(x: Any) -> str:
    """``f32[4,3]`` for arrays, ``repr`` (shortened) for other leaves."""
    shape = getattr(x, "shape", None)
    dtype = getattr(x, "dtype", None)
    if shape is not None and dtype is not None:
        return f"{_short_dtype(dtype)}[{','.join(str(d) for d in shape)}]"
    text = repr(x)
    return text if len(text) <= 40 else text[:37] + "..."


def describe_args(args: Sequence[Any], names: Sequence[str] | None = None) -> list[str]:
    """One line per argument: its name (if known) and the types of its leaves."""
    out = []
    for i, arg in enumerate(args):
        leaves = jax.tree_util.tree_leaves(arg)
        if len(leaves) == 1 and leaves[0] is arg:
            text = describe_value(arg)
        else:
            shown = ", ".join(describe_value(leaf) for leaf in leaves[:4])
            more = f", … {len(leaves) - 4} more" if len(leaves) > 4 else ""
            text = f"{type(arg).__name__}({shown}{more})"
        name = names[i] if names and i < len(names) else f"arg{i}"
        out.append(f"{name}: {text}")
    return out


def _arg_names(fn: Callable[..., Any], n: int) -> list[str] | None:
    import inspect

    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None
    return params[:n] if len(params) >= n else None


class Compilation:
    """Everything one ``%%compile`` / ``nbcompile.compile`` produced.

    Attributes that a backend cannot give are ``None`` (documented per attribute), never faked.
    """

    def __init__(
        self,
        *,
        name: str,
        fn: Callable[..., Any],
        original: Callable[..., Any],
        stages: Stages,
        source: SourceInfo,
        args: tuple[Any, ...],
        backend: str,
        options: dict[str, Any] | None = None,
        grad: Compilation | None = None,
        grad_argnums: tuple[int, ...] | None = None,
    ) -> None:
        self.name = name
        self.fn = fn
        self.original = original
        self.stages = stages
        self.source = source
        self.backend = backend
        self.options = dict(options or {})
        self.grad = grad
        self.grad_argnums = grad_argnums
        self.args = args  # the example arguments of the compiled program
        self.signature = describe_args(args, _arg_names(original, len(args)))
        self.extras: dict[str, Any] = {}
        self.notes: list[str] = []
        self.adapted: Any = None
        self._timings = dict(stages.timings)
        self._analysis: Any = None

    # --- artifacts ---------------------------------------------------------------------------
    @property
    def jaxpr(self) -> Any:
        """The closed jaxpr of the traced program."""
        return self.stages.closed_jaxpr

    @property
    def lowered(self) -> Any:
        return self.stages.lowered

    @property
    def compiled(self) -> Any | None:
        """``jax.stages.Compiled``, or None where the backend could not compile."""
        return self.stages.compiled

    @functools.cached_property
    def stablehlo(self) -> str:
        """StableHLO text before optimisation (with source locations)."""
        return self.stages.lowered.as_text(debug_info=True)

    @functools.cached_property
    def hlo(self) -> str | None:
        """XLA's optimised HLO text, or None where the backend could not compile."""
        return self.stages.hlo_text

    @property
    def timings(self) -> dict[str, float]:
        """Seconds per stage (trace, lower, compile, analyse) plus bench results if measured."""
        return dict(self._timings)

    # --- analysis ----------------------------------------------------------------------------
    @property
    def analysis(self) -> Any:
        """The :class:`nbcompile.analysis.Analysis` of this program (computed on first use)."""
        if self._analysis is None:
            from .analysis import analyse

            if recompile_with_metadata(self.stages):
                self.__dict__.pop("hlo", None)
                self._timings.update(self.stages.timings)
            t0 = time.perf_counter()
            self._analysis = analyse(self.artifacts())
            self._timings["analyse"] = time.perf_counter() - t0
        return self._analysis

    def artifacts(self) -> Artifacts:
        return Artifacts(
            closed_jaxpr=self.jaxpr, lowered=self.lowered, compiled=self.compiled,
            hlo_text=self.hlo, source=self.source, backend=self.backend,
            grad_argnums=self.grad_argnums if self.options.get("value_and_grad") else None,
            name=self.name, fn=self.original,
        )

    @property
    def graph(self) -> Any:
        """:class:`nbcompile.analysis.Graph` of the traced program."""
        return self.analysis.traced_graph

    @property
    def fusions(self) -> list[Any]:
        """The kernels XLA fused, each with member ops, kind, cost and cell lines."""
        return self.analysis.fusions

    @property
    def folded(self) -> list[Any]:
        """Constants folded at trace, lowering or XLA compile time."""
        return self.analysis.folded

    @property
    def gradient(self) -> Any | None:
        """Forward/backward view of the ``value_and_grad`` program (None without ``grad``)."""
        return self.grad.analysis.gradient if self.grad is not None else None

    @property
    def cost(self) -> dict[str, Any] | None:
        """XLA's cost analysis, normalised (None where the backend reports none)."""
        return self.analysis.cost

    @property
    def memory(self) -> dict[str, Any] | None:
        """XLA's memory analysis, normalised (None where the backend reports none)."""
        return self.analysis.memory

    def summary(self) -> dict[str, Any]:
        """Headline figures: op counts before/after, kernels, fusions, folded, flops, times."""
        out: dict[str, Any] = {"name": self.name, "backend": self.backend}
        out.update(self.analysis.summary())
        for stage, seconds in self.timings.items():
            out[f"{stage}_seconds"] = seconds
        return out

    def diff(self, other: Compilation) -> Any:
        """What changed from ``other`` to this compilation (ops, fusions, costs, signature)."""
        from .analysis import diff

        return diff(other.analysis, self.analysis)

    # --- report and display ------------------------------------------------------------------
    def _state_key(self) -> tuple[Any, ...]:
        """Changes whenever something the report shows changes (extras, notes, debug)."""
        extras = tuple((k, id(v)) for k, v in self.extras.items())
        return (extras, tuple(self.notes), id(getattr(self, "debug", None)),
                tuple(self._timings.items()))

    def report(self) -> dict[str, Any]:
        """The JSON report every view reads (docs/report-schema.md); cached until the
        compilation's extras, notes or timings change (re-displays are instant)."""
        from .report import build_report

        self.analysis  # noqa: B018 - analyse first: it may add to the timings
        key = self._state_key()
        cached = self.__dict__.get("_report")
        if cached is None or cached[0] != key:
            cached = (key, build_report(self))
            self.__dict__["_report"] = cached
        return cached[1]

    def to_dot(self, which: str = "traced") -> Any:
        """The ``traced`` / ``compiled`` / ``gradient`` graph as a ``graphviz.Digraph``."""
        from .report.dot import to_dot

        graph = self.report()["graphs"].get(which)
        if graph is None:
            raise ValueError(f"no {which!r} graph in this compilation")
        return to_dot(graph, name=f"{self.name}_{which}")

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        from .report import mimebundle

        return mimebundle(self)

    def __repr__(self) -> str:
        from .report import text_summary

        return text_summary(self.report())


def _as_argnums(grad: Any) -> tuple[int, ...] | None:
    if grad is None or grad is False:
        return None
    if grad is True:
        return (0,)
    if isinstance(grad, int):
        return (grad,)
    return tuple(int(g) for g in grad)


def _needs_target(backend: str | None, *others: Any) -> bool:
    if any(o for o in others):
        return True
    return backend is not None and _platform(backend) != jax.default_backend()


def _platform(backend: str) -> str:
    return {"gpu": "gpu", "cuda": "gpu", "rocm": "gpu"}.get(backend, backend)


def _name_of(fn: Any) -> str:
    for obj in (fn, getattr(fn, "func", None), getattr(fn, "__wrapped__", None)):
        name = getattr(obj, "__name__", None)
        if isinstance(name, str):
            return name
    return type(fn).__name__


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
    target: str | None = None,
    mesh: str | None = None,
    shard: dict[str, str] | None = None,
    **jit_kwargs: Any,
) -> Compilation:
    """Trace, lower and compile ``fn(*example_args)`` and return the :class:`Compilation`.

    ``grad`` (argnums, or True for 0) also compiles ``jax.value_and_grad(fn, argnums)`` for the
    Gradient view. ``jit_kwargs`` (``static_argnames``, ``donate_argnames``, ...) go to
    ``jax.jit``. ``backend`` picks the target platform (default: JAX's default backend).
    """
    __tracebackhide__ = True
    from .capture.adapt import adapt_target

    adapted = adapt_target(fn, example_args, example_kwargs or {})
    program, args, kwargs = adapted.fn, adapted.args, adapted.kwargs
    source = source or source_of_function(program)
    argnums = _as_argnums(grad)
    if argnums is not None and adapted.params_argnums and grad is True:
        argnums = tuple(adapted.params_argnums)
    jitted = None
    if hasattr(program, "trace") and hasattr(program, "lower") and not jit_kwargs:
        jitted = program  # already a jax.jit object: keep its own options
    if _needs_target(backend, topology, target, mesh, shard):
        from .stages.targets import compile_on_target

        comp = compile_on_target(
            program, args, kwargs, backend=backend, source=source,
            name=name or adapted.name or _name_of(fn), jit_kwargs=jit_kwargs, progress=progress,
            topology=topology, gpu_target=target, mesh=mesh, shard=shard,
        )
        comp.adapted = adapted
        return comp
    stages = run_stages(
        program, args, kwargs, source=source, jit_kwargs=jit_kwargs, progress=progress,
        jitted=jitted, compiler_options=compiler_options,
    )
    grad_c = None
    if argnums is not None:
        gfn = make_jitted(program, grad_argnums=argnums, jit_kwargs=jit_kwargs)
        gstages = run_stages(program, args, kwargs, source=source, jitted=gfn,
                             progress=(lambda m: progress(f"{m} (gradient)")) if progress else None)
        grad_c = Compilation(
            name=f"value_and_grad({name or adapted.name or _name_of(fn)})", fn=gfn,
            original=program,
            stages=gstages, source=source, args=args, backend=jax.default_backend(),
            options={"value_and_grad": True}, grad_argnums=argnums,
        )
    comp = Compilation(
        name=name or adapted.name or _name_of(fn), fn=stages.jitted, original=program,
        stages=stages, source=source, args=args, backend=jax.default_backend(),
        options=dict(jit_kwargs), grad=grad_c, grad_argnums=argnums,
    )
    comp.adapted = adapted
    return comp


def compare(*compilations: Compilation) -> Any:
    """Side-by-side table of the same model compiled for several targets (``.text()``)."""
    from .targets import compare as compare_rows

    rows = []
    for c in compilations:
        label = str(c.options.get("target") or c.backend).upper().replace("CUDA", "GPU")
        rows.append((label, c.hlo, c.cost, c.memory))
    return compare_rows(rows)
