"""One compile of an adapted call: resolve the target, place the arguments, run the stages.

:func:`build_program` is the only place nbcompile compiles a user's program, for every target
and option: the plain program and, with ``--grad``, its ``value_and_grad`` both go through
nbcompile.stages (trace and lower, then compile) on the same placed arguments. A ``%%compile``
run calls its two halves apart: :func:`lower_program` (every run: its program is the cache
key), then :func:`compile_program` only where the cache has no such program. Options are checked here in
the user's own words first (``--static`` names, ``--grad`` positions, async/generator
functions), so JAX never gets to complain about nbcompile's internal names.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import jax

from ._compat import reuse_executable
from .analysis.passes_log import PassLogWatcher
from .capture.models import Adapted
from .capture.names import positional_names
from .capture.source import SourceInfo
from .errors import CaptureError, TraceError
from .stages import (
    Progress,
    Stages,
    compile_stages,
    limits,
    lower_stages,
    make_jitted,
    recompile_with_metadata,
)
from .targets import Target, infer_mesh, parse_shard_specs, place_args, resolve_target

__all__ = [
    "CompileRequest",
    "LoweredProgram",
    "Program",
    "build_program",
    "compile_program",
    "describe_args",
    "describe_value",
    "lower_program",
    "relocate_program",
]


@dataclass(frozen=True)
class CompileRequest:
    """The options that shape the compiled program (the cache key covers all of them)."""

    backend: str | None = None
    grad: tuple[int, ...] | None = None
    grad_is_default: bool = False  # grad=True: a model's parameters rather than position 0
    topology: str | None = None
    gpu: str | None = None
    mesh: str | None = None
    shard: dict[str, str] = field(default_factory=dict)
    jit_kwargs: dict[str, Any] = field(default_factory=dict)
    compiler_options: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        """What the view lists under options (only those that were given)."""
        out: dict[str, Any] = {k: v for k, v in self.jit_kwargs.items() if v}
        for key in ("backend", "topology", "gpu", "mesh"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        if self.shard:
            out["shard"] = dict(self.shard)
        if self.grad is not None:
            out["grad"] = list(self.grad)
        return out


@dataclass
class Program:
    """What one compile produced; shared by every Compilation a cache hit reuses it for.

    ``analysis`` is computed on first use and kept (``analysis_seconds`` says how long it took).
    ``metal`` is the :class:`~nbcompile.measure.metal.MetalDump` read from the program's own
    compile when it wrote XLA's dump (``--passes``: ``stages.dump``), so every run reusing this
    Program has the pass pipeline and kernel code without compiling again.
    """

    stages: Stages
    request: CompileRequest
    name: str
    source: SourceInfo
    fn: Any = None  # the function traced (names closed-over constants in the analysis)
    grad: Program | None = None
    grad_argnums: tuple[int, ...] | None = None
    is_value_and_grad: bool = False
    notes: list[str] = field(default_factory=list)
    _analysis: Any = field(default=None, repr=False)
    analysis_seconds: float | None = None
    metal: Any = field(default=None, repr=False)

    @property
    def analysis(self) -> Any:
        return self.analyse()

    def analyse(self, progress: Progress | None = None) -> Any:
        """The analysis, computed now if it was not (``progress`` is told each stage)."""
        if self._analysis is None:
            from .analysis import Artifacts, analyse_cached

            t0 = time.perf_counter()
            recompile_with_metadata(self.stages, self.request.compiler_options)
            stages = self.stages
            self._analysis = analyse_cached(
                Artifacts(
                    closed_jaxpr=stages.closed_jaxpr,
                    lowered=stages.lowered,
                    compiled=stages.compiled,
                    hlo_text=stages.hlo_text,
                    source=self.source,
                    backend=stages.target.platform,
                    name=self.name,
                    fn=self.fn,
                    grad_argnums=self.grad_argnums if self.is_value_and_grad else None,
                    progress=progress,
                    pre_optimisation=stages.early_hlo.text if stages.early_hlo else None,
                    beside_compile=stages.early_hlo.beside if stages.early_hlo else None,
                    calls=stages.calls,
                    keep_optimised=self._keep_optimised if self.metal is not None else None,
                )
            )
            self.analysis_seconds = time.perf_counter() - t0
        return self._analysis

    def _keep_optimised(self, text: str, module: Any) -> None:
        """``--passes``: the optimised module the analysis parsed goes to the program's dump,
        where the kernels' look-ups (their code, the library calls the view names) read it
        instead of parsing it again (~0.2 s for a 12-layer train step; ``parsed_module``)."""
        self.metal.module = (text, module)

    def refresh_locations(self) -> None:
        """Cell numbers in the analysis as they are now (a cache hit after cells re-ran)."""
        if self._analysis is not None:
            from .analysis import refresh_locations

            refresh_locations(self._analysis, self.source)


def _traced_beside(source: Any, name: str, *, grad: bool) -> Any:
    """The traced part of a program's analysis, for ``run_stages`` to make beside XLA's compile
    (what ``Program.analyse`` would make first; it is used only if it is this program's)."""

    def traced(closed_jaxpr: Any, calls: Any, pre_text: str) -> Any:
        from .analysis.core import analyse_traced

        return analyse_traced(closed_jaxpr, source, name, grad, calls, pre_text)

    return traced


def _short_dtype(dtype: Any) -> str:
    name = str(dtype)
    for long, short in (
        ("float", "f"),
        ("bfloat", "bf"),
        ("uint", "u"),
        ("int", "s"),
        ("complex", "c"),
    ):
        if name.startswith(long):
            return short + name[len(long) :]
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
        name = names[i] if names and i < len(names) else f"args[{i}]"
        out.append(f"{name}: {text}")
    return out


def _unwrapped(fn: Any) -> Any:
    for _ in range(8):
        inner = getattr(fn, "__wrapped__", None) or getattr(fn, "func", None)
        if inner is None:
            return fn
        fn = inner
    return fn


def _check_kind(adapted: Adapted) -> None:
    """async def and generator functions cannot be traced: say so, naming what they are."""
    fn = _unwrapped(adapted.fn)
    kind = (
        "an async def (a coroutine function)"
        if inspect.iscoroutinefunction(fn)
        else "a generator function (it yields)"
        if inspect.isgeneratorfunction(fn)
        else None
    )
    if kind is not None:
        raise TraceError(
            f"`{adapted.name}` is {kind}, which JAX cannot trace into a program",
            code="NBC208",
            hint="compile a regular def that returns arrays; await / iterate outside it",
        )


def _jit_options(adapted: Adapted, jit_kwargs: dict[str, Any]) -> tuple[dict[str, Any], set[int]]:
    """``--static`` / ``--donate`` names, as the user wrote them, turned into what ``jax.jit``
    needs for the program actually compiled (argument positions of the adapted function).
    Unknown names are refused listing the legal ones."""
    out = dict(jit_kwargs)
    names = list(adapted.arg_names)
    own = positional_names(adapted.fn) if adapted.rebindable else []
    keyword_ok = set(adapted.kwargs) | set(_keyword_names(adapted.fn) if adapted.rebindable else ())
    static: set[int] = set(_as_tuple(out.get("static_argnums")))
    for option, nums_key in (
        ("static_argnames", "static_argnums"),
        ("donate_argnames", "donate_argnums"),
    ):
        wanted = _as_tuple(out.pop(option, ()))
        if not wanted:
            continue
        flag = "--static" if option.startswith("static") else "--donate"
        nums, kept = list(_as_tuple(out.get(nums_key))), []
        for name in wanted:
            if adapted.rebindable and (name in own or name in keyword_ok):
                kept.append(name)  # the user's own function: jax.jit takes the name itself
            elif name in names:
                nums.append(names.index(name))
            else:
                user = (
                    names[: len(names) - len(adapted.state_argnums)]
                    if not adapted.models or adapted.kind != "function"
                    else [n for i, n in enumerate(names) if i not in adapted.state_argnums]
                )
                legal = ", ".join([*user, *sorted(keyword_ok - set(names))]) or "(none)"
                raise CaptureError(
                    f"{flag} {name}: `{adapted.name}` has no argument named `{name}`",
                    code="NBC114",
                    hint=f"arguments are: {legal}",
                )
        if kept:
            out[option] = tuple(kept)
        if nums:
            out[nums_key] = tuple(sorted(set(nums)))
        if option == "static_argnames":
            static |= set(nums) | {own.index(n) for n in kept if n in own}
    return out, static


def _keyword_names(fn: Any) -> list[str]:
    try:
        params = inspect.signature(_unwrapped(fn)).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD]


def _as_tuple(value: Any) -> tuple[Any, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, int | str) else tuple(value)


def _grad_argnums(adapted: Adapted, request: CompileRequest) -> tuple[int, ...] | None:
    if request.grad is None:
        return None
    argnums = request.grad
    if request.grad_is_default and adapted.params_argnums:
        argnums = tuple(adapted.params_argnums)
    bad = [a for a in argnums if not -len(adapted.args) <= a < len(adapted.args)]
    if bad:
        raise CaptureError(
            f"--grad {bad[0]}: `{adapted.name}` is called with {len(adapted.args)} arguments",
            code="NBC114",
            hint="give argument positions, e.g. --grad 0 ("
            + ", ".join(f"{i}={n}" for i, n in enumerate(adapted.arg_names))
            + ")",
        )
    return argnums


def _resolve(request: CompileRequest, adapted: Adapted) -> Target:
    mesh = request.mesh
    if mesh is None and not request.shard:
        backend_here = request.backend in (None, jax.default_backend())
        if not (backend_here and request.topology is None and request.gpu is None):
            mesh = infer_mesh((adapted.args, adapted.kwargs))  # keep the args' own shardings
    return resolve_target(
        backend=request.backend, topology=request.topology, gpu=request.gpu, mesh=mesh
    )


def _returns_loss_and_aux(out_info: Any) -> bool:
    """Whether the traced function returns ``(scalar loss, anything)``, the ``has_aux``
    convention of ``jax.value_and_grad`` (Flax's and Keras' own loss functions use it)."""
    if not isinstance(out_info, tuple) or len(out_info) != 2:
        return False
    return tuple(getattr(out_info[0], "shape", (None,))) == ()


@dataclass
class LoweredProgram:
    """What :func:`lower_program` traced and lowered (nothing compiled yet): ``stages`` and,
    with ``--grad``, ``grad_stages``; the rest is what :func:`compile_program` needs."""

    stages: Stages
    grad_stages: Stages | None
    request: CompileRequest
    source: SourceInfo
    name: str
    fn: Any
    arg_names: list[str]
    grad_argnums: tuple[int, ...] | None
    notes: list[str] = field(default_factory=list)

    @property
    def lowered(self) -> tuple[Any, ...]:
        """The ``jax.stages.Lowered`` of each program (the cache key's input)."""
        return tuple(s.lowered for s in self.lowered_stages)

    @property
    def lowered_stages(self) -> tuple[Stages, ...]:
        return tuple(s for s in (self.stages, self.grad_stages) if s is not None)

    def misnumbered(self) -> list[str]:
        """Notes on functions whose line numbers Python does not know
        (:func:`nbcompile.stages.key.misnumbered`)."""
        from .stages.key import misnumbered

        return misnumbered(self.stages.traced.jaxpr)

    @property
    def printed_at_trace(self) -> str:
        return "".join(s.printed_at_trace for s in self.lowered_stages)


def lower_program(
    adapted: Adapted,
    request: CompileRequest,
    *,
    source: SourceInfo,
    name: str | None = None,
    progress: Progress | None = None,
    record_calls: bool = True,
) -> LoweredProgram:
    """Trace and lower ``adapted`` as ``request`` says: the part of a compile every
    ``%%compile`` run pays (its program is the cache key); :func:`compile_program` finishes.
    ``record_calls`` False: without recording the user's calls (what the view groups by), for a
    look-up only — the same program, its operations' names without the call paths."""
    __tracebackhide__ = True
    _check_kind(adapted)
    jit_kwargs, static = _jit_options(adapted, request.jit_kwargs)
    argnums = _grad_argnums(adapted, request)
    target = _resolve(request, adapted)
    specs = parse_shard_specs(request.shard, target.mesh.axis_names if target.mesh else None)
    names = list(adapted.arg_names)
    static_names = set(_as_tuple(jit_kwargs.get("static_argnames")))
    limits.check_arguments(adapted.args, adapted.kwargs, names, static, static_names)
    placement = place_args(
        adapted.args,
        adapted.kwargs,
        target,
        names=names,
        static=static,
        static_names=static_names,
        specs=specs,
    )
    label = name or adapted.name
    common = {"source": source, "arg_names": names, "record_calls": record_calls}
    options = request.compiler_options or None
    stages = lower_stages(
        make_jitted(adapted.fn, jit_kwargs=jit_kwargs, compiler_options=options),
        placement,
        target,
        progress=progress,
        **common,
    )
    gstages = None
    notes = []
    capped = stages.calls.capped if stages.calls is not None else 0
    if capped:
        notes.append(
            f"call groups: only the first {capped:,} calls of your functions are grouped by "
            "call (more were made while tracing: the call capture stops there); the operations "
            "of later calls are not grouped by call"
        )
    if argnums is not None:
        say = (lambda m: progress(f"{m} (gradient)")) if progress else None
        has_aux = _returns_loss_and_aux(stages.traced.out_info)
        if has_aux:
            notes.append(
                "--grad: the function returns (loss, aux); the gradient is of the "
                "loss, aux is carried along (value_and_grad(..., has_aux=True))"
            )
        gstages = lower_stages(
            make_jitted(
                adapted.fn,
                grad_argnums=argnums,
                has_aux=has_aux,
                jit_kwargs=jit_kwargs,
                compiler_options=options,
            ),
            replace(placement, per_device_shapes=dict(placement.per_device_shapes)),
            target,
            progress=say,
            **common,
        )
    if target.lower_only and request.compiler_options:
        notes.append(f"compiler options not used: nothing is compiled for {target.label} here")
    return LoweredProgram(
        stages=stages,
        grad_stages=gstages,
        request=request,
        source=source,
        name=label,
        fn=adapted.fn,
        arg_names=names,
        grad_argnums=argnums,
        notes=notes,
    )


def compile_program(
    lowered: LoweredProgram, *, progress: Progress | None = None, passes: bool = False
) -> Program:
    """Compile what :func:`lower_program` lowered. ``passes`` (``--passes``): the program's
    compile writes XLA's dump (``Stages.dump``); not the gradient program's, whose passes stay
    on demand. Not part of the cache key: a Program compiled without it gets its dump by one
    more compile when asked."""
    __tracebackhide__ = True
    source, label = lowered.source, lowered.name
    common = {"source": source, "arg_names": lowered.arg_names}
    stages = compile_stages(
        lowered.stages,
        progress=progress,
        dump=passes,
        beside_compile=_traced_beside(source, label, grad=False),
        watch_dump=PassLogWatcher if passes else None,
        **common,
    )
    grad = None
    if lowered.grad_stages is not None:
        say = (lambda m: progress(f"{m} (gradient)")) if progress else None
        gstages = compile_stages(
            lowered.grad_stages,
            progress=say,
            beside_compile=_traced_beside(source, f"value_and_grad({label})", grad=True),
            **common,
        )
        grad = Program(
            stages=gstages,
            request=lowered.request,
            name=f"value_and_grad({label})",
            source=source,
            fn=lowered.fn,
            grad_argnums=lowered.grad_argnums,
            is_value_and_grad=True,
        )
    return Program(
        stages=stages,
        request=lowered.request,
        name=label,
        source=source,
        fn=lowered.fn,
        grad=grad,
        grad_argnums=lowered.grad_argnums,
        notes=list(lowered.notes),
    )


def relocate_program(lowered: LoweredProgram, old: Program) -> Program | None:
    """``lowered`` served by ``old``'s executables, without XLA: ``old`` is the same program
    (its key's ``executable`` digest is ``lowered``'s) whose code was elsewhere. The stages are
    this run's (trace, lowering, their lines); the executables ``old``'s, their HLO's source
    tables rewritten to this run's places (:func:`nbcompile.stages.relocate.relocate_hlo`), so
    the analysis made from them names the lines as they are now. ``old.stages.jitted`` stays
    the callable (its executable is this program's: calling it compiles nothing). None where
    any part cannot be paired: the caller compiles."""
    from .capture.source import cell_identity
    from .stages import called_the_program
    from .stages.relocate import relocate_hlo

    pairs = [(lowered.stages, old.stages)]
    if lowered.grad_stages is not None:
        if old.grad is None:
            return None
        pairs.append((lowered.grad_stages, old.grad.stages))
    elif old.grad is not None:
        return None
    for new, was in pairs:
        t0 = time.perf_counter()
        text = was.hlo_text
        if was.compiled is None or text is None or new.target.lower_only:
            return None
        moved = relocate_hlo(
            text,
            was.lowered.compiler_ir("stablehlo"),
            new.lowered.compiler_ir("stablehlo"),
            cell_identity,
            called_the_program,
        )
        if moved is None:
            return None
        compiled = reuse_executable(new.lowered, was.compiled, moved)
        if compiled is None:
            return None
        new.timings["relocate"] = time.perf_counter() - t0
        new.compiled, new.jitted = compiled, was.jitted
        new._text = (compiled, moved)
        new.output_shardings = dict(was.output_shardings)
        new.notes = list(was.notes)
    program = Program(
        stages=lowered.stages,
        request=lowered.request,
        name=lowered.name,
        source=lowered.source,
        fn=lowered.fn,
        grad_argnums=lowered.grad_argnums,
        notes=list(lowered.notes),
    )
    if lowered.grad_stages is not None:
        program.grad = Program(
            stages=lowered.grad_stages,
            request=lowered.request,
            name=f"value_and_grad({lowered.name})",
            source=lowered.source,
            fn=lowered.fn,
            grad_argnums=lowered.grad_argnums,
            is_value_and_grad=True,
        )
    return program


def build_program(
    adapted: Adapted,
    request: CompileRequest,
    *,
    source: SourceInfo,
    name: str | None = None,
    progress: Progress | None = None,
    passes: bool = False,
) -> Program:
    """Compile ``adapted`` as ``request`` says (see the module docstring):
    :func:`lower_program` then :func:`compile_program`."""
    __tracebackhide__ = True
    lowered = lower_program(adapted, request, source=source, name=name, progress=progress)
    return compile_program(lowered, progress=progress, passes=passes)
