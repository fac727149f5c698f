"""Every reach of the freeze package into JAX internals, with version notes.

Kept apart so the lead can fold it into ``nbcompile/_compat.py``. Measured on JAX 0.10.2.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import jax
from jax.extend import core as jex_core

# Primitives whose closed jaxpr is inlined when re-tracing, so the constants they close over
# become top-level constants that can be hoisted into the weight section. JAX 0.10 names the
# jit primitive "jit" (older: "pjit"); custom_jvp/vjp calls only matter for differentiation,
# which a frozen inference program never does.
_INLINE = {
    "jit": "jaxpr",
    "pjit": "jaxpr",
    "closed_call": "call_jaxpr",
    "custom_jvp_call": "call_jaxpr",
    "custom_vjp_call": "call_jaxpr",
}

# Custom-call targets a frozen program may use: JAX's own "guaranteed stable" export set
# (jax._src.export._export._CUSTOM_CALL_TARGETS_GUARANTEED_STABLE, present since 0.4.14) minus
# targets that call back into another runtime. The fallback is that set's non-FFI part.
_DENY = frozenset({"tf.call_tf_function"})
_FALLBACK_ALLOWED = frozenset(
    {
        "Sharding",
        "SPMDFullToShardShape",
        "SPMDShardToFullShape",
        "annotate_device_placement",
        "cu_threefry2x32_ffi",
        "hip_threefry2x32_ffi",
        "Eigh",
        "Qr",
        "ProductOfElementaryHouseholderReflectors",
        "LuDecomposition",
        "ApproxTopK",
        "stablehlo.dynamic_approx_top_k",
        "AllocateBuffer",
        "stablehlo.dynamic_reduce_window",
        "stablehlo.dynamic_rng_bit_generator",
        "stablehlo.dynamic_top_k",
        "shape_assertion",
    }
)


def allowed_custom_calls() -> frozenset[str]:
    try:
        from jax._src.export import _export

        stable = frozenset(_export._CUSTOM_CALL_TARGETS_GUARANTEED_STABLE)
    except (ImportError, AttributeError):
        stable = _FALLBACK_ALLOWED
    return stable - _DENY


def serialization_version() -> int | None:
    """The jax.export flatbuffer schema version this JAX writes (None if not exposed).

    The flatbuffer itself always records 3 for old readers' sake (JAX 0.10 comment), so the
    manifest keeps the real one.
    """
    try:
        from jax._src.export import serialization

        return int(serialization._SERIALIZATION_VERSION)
    except (ImportError, AttributeError):
        return None


def calling_convention_range() -> tuple[int, int]:
    return (
        int(jax.export.minimum_supported_calling_convention_version),
        int(jax.export.maximum_supported_calling_convention_version),
    )


def inline_eval(jaxpr: Any, consts: Sequence[Any], *args: Any) -> list[Any]:
    """Evaluate ``jaxpr`` like ``jax.core.eval_jaxpr``, inlining nested jit calls."""
    from jax._src import source_info_util

    env: dict[Any, Any] = {}

    def read(v: Any) -> Any:
        return v.val if isinstance(v, jex_core.Literal) else env[v]

    env.update(zip(jaxpr.constvars, consts, strict=True))
    env.update(zip(jaxpr.invars, args, strict=True))
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        inner = eqn.params.get(_INLINE.get(eqn.primitive.name, ""), None)
        if isinstance(inner, jex_core.ClosedJaxpr):
            outs = inline_eval(inner.jaxpr, inner.consts, *invals)
        else:
            params = eqn.primitive.get_bind_params(eqn.params)
            name_stack = source_info_util.current_name_stack() + eqn.source_info.name_stack
            with (
                source_info_util.user_context(eqn.source_info.traceback, name_stack=name_stack),
                eqn.ctx.manager,
            ):
                outs = eqn.primitive.bind(*invals, **params)
            if not eqn.primitive.multiple_results:
                outs = [outs]
        env.update(zip(eqn.outvars, outs, strict=True))
    return [read(v) for v in jaxpr.outvars]


@contextlib.contextmanager
def single_threaded_context() -> Iterator[Any]:
    """A JAX MLIR context that reads single-threaded (JAX 0.10 ``mlir.make_ir_context``).

    JAX's contexts share a global MLIR thread pool. In a fork of a process that has run it
    (a shape-polymorphic export does), the child has no pool threads and reading a module
    with several functions would wait on them forever: read single-threaded.
    """
    from jax._src.interpreters import mlir

    context = mlir.make_ir_context()
    context.enable_multithreading(False)
    with context:
        yield context


_ORPHANED_POOLS: list[Any] = []


def fresh_mlir_thread_pool() -> None:
    """In a forked child: give JAX's MLIR contexts a new thread pool (JAX 0.10
    ``mlir.global_thread_pool``, read by ``make_ir_context`` at each call).

    The inherited pool's threads do not exist in the child, so lowering with it waits forever
    once the parent has used it. The old pool is kept referenced: destroying it would join
    threads that are not there. Only for a process that ends with ``os._exit``.

    JAX 0.12 also reuses one context per thread (``mlir._thread_local_context``, up to ten
    uses), made with the pool of its day: a child inheriting it waits the same way in the
    verifier, so that context is dropped too and the next lowering makes a fresh one.
    """
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    _ORPHANED_POOLS.append(mlir.global_thread_pool)
    mlir.global_thread_pool = ir.ThreadPool()
    reused = getattr(mlir, "_thread_local_context", None)  # JAX >= 0.11
    if reused is not None and reused.value is not None:
        _ORPHANED_POOLS.append(reused.value)  # kept, as the pool: its teardown may wait too
        reused.set_local(None)


def parse_artifact(serialized: bytes) -> Any:
    """The ``ir.Module`` of a StableHLO portable artifact (inside an active context)."""
    from jax._src.lib import _jax
    from jax._src.lib.mlir import ir

    module = _jax.mlir.deserialize_portable_artifact(serialized)
    if isinstance(module, str | bytes):
        module = ir.Module.parse(module)
    return module


def serialize_module(module: Any) -> bytes:
    """A module as a portable artifact, the way ``jax.export`` writes it (JAX 0.10.2
    ``jax._src.export._export._module_to_bytecode``)."""
    from jax._src.export import _export

    return _export._module_to_bytecode(module)


def lowered_custom_calls(fn: Any, operands: Sequence[Any], platform: str) -> list[dict[str, Any]]:
    """Custom calls JAX writes lowering ``fn`` on ``operands`` for ``platform``, read back
    through the same portable-artifact round trip and walk as a frozen file's program."""
    from jax._src import config

    from nbcompile.frozen import _program

    # The GPU threefry kernel is only written with this flag on (read at lowering time);
    # 64-bit operands keep their types only with x64 on (as when the file was written).
    wide = any(
        getattr(a.dtype, "itemsize", 0) == 8 or str(a.dtype) == "complex128" for a in operands
    )
    # jax.export, as programs are written (a plain jit's lowering of lgamma for a platform
    # without its FFI plugin does not serialise on JAX 0.12.1), with forward compatibility off:
    # inside its window export writes a new target's older lowering (0.12.1's lgamma/digamma
    # FFI calls), which a file written with the flag on, or by a later JAX, does not.
    with (
        config.threefry_gpu_kernel_lowering(True),
        config.enable_x64(wide),
        config.export_ignore_forward_compatibility(True),
    ):
        exported = jax.export.export(jax.jit(fn), platforms=[platform])(*operands)
    return _program.module_facts(exported.mlir_module_serialized)["custom_calls"]


def lax_linalg() -> Any:
    """``jax._src.lax.linalg`` (JAX 0.10.2): ``jax.lax.linalg`` without ``geqrf``."""
    from jax._src.lax import linalg

    return linalg


def threefry2x32(k0: Any, k1: Any, x0: Any, x1: Any) -> Any:
    """The threefry primitive (JAX 0.10.2 ``jax._src.random.threefry2x32.threefry2x32_p``);
    lowered by `lowered_custom_calls` with the GPU kernel on."""
    from jax._src.random.threefry2x32 import threefry2x32_p

    return threefry2x32_p.bind(k0, k1, x0, x1)


def is_tracer(x: Any) -> bool:
    """Whether ``x`` is a JAX tracer (inside the caller's jit/grad/vmap; JAX 0.10 core)."""
    from jax._src import core

    return isinstance(x, core.Tracer)


def on_device_memory(aval: Any) -> bool:
    """Whether an abstract value lives in device memory (JAX 0.10 ``core.MemorySpace``)."""
    space = getattr(aval, "memory_space", None)
    return space is None or getattr(space, "name", str(space)) == "Device"


def program_stats(exported: jax.export.Exported) -> tuple[int, list[str]]:
    """(StableHLO op count, custom-call targets) of an Exported, by the one shared definition
    (``nbcompile._compat.stablehlo_ops``), without any limit."""
    from .._compat import stablehlo_ops

    with single_threaded_context():
        return stablehlo_ops(parse_artifact(exported.mlir_module_serialized))


def export_platform(device: jax.Device) -> str:
    """The jax.export platform name ("cpu", "cuda", "rocm", "tpu") of a device."""
    platform = device.platform
    if platform == "gpu":
        version = str(getattr(device.client, "platform_version", "")).lower()
        return "rocm" if "rocm" in version or "hip" in version else "cuda"
    return platform


def devices_for(platform: str) -> list[jax.Device]:
    """Local devices for an export platform; [] when that backend is not available."""
    backend = {"cuda": "gpu", "rocm": "gpu"}.get(platform, platform)
    try:
        devices = jax.devices(backend)
    except RuntimeError:
        return []
    return [d for d in devices if export_platform(d) == platform]


def unique(items: Iterable[str]) -> list[str]:
    return sorted(set(items))


def check_refines(
    exported: jax.export.Exported,
    specs: Sequence[Any],
    *,
    platform: str | None = None,
    compile_fallback: bool = True,
) -> bool:
    """Raise if a shape-polymorphic ``exported`` cannot be specialised to concrete ``specs``.

    Lowering alone does not resolve symbolic shapes: JAX refines them (and evaluates the shape
    assertions) only when compiling (``mlir.refine_polymorphic_shapes``, JAX 0.10). Running the
    refinement here catches a program that traced with a symbolic batch but really needs the
    example's size (e.g. ``x.reshape(256 * 8)``) without compiling it. Without that internal,
    the program is compiled for the local backend instead (``compile_fallback``; a forked child
    cannot compile, so there it returns False: nothing was refined). True: refined.
    """
    platform = platform or exported.platforms[0]
    traced = jax.jit(exported.call).trace(*specs)
    lowered = traced.lower(lowering_platforms=(platform,))
    try:
        from jax._src.interpreters import mlir

        refine = mlir.refine_polymorphic_shapes
    except (ImportError, AttributeError):
        if compile_fallback:
            lowered.compile()
        return False
    refine(lowered.compiler_ir("stablehlo"))
    return True


def specialise(
    exported: jax.export.Exported, specs: Sequence[Any], platform: str
) -> tuple[jax.export.Exported, Any] | None:
    """``exported`` (a program with symbolic shapes) as a static program at concrete
    ``specs``, and its refined module; None where JAX's refinement internal is missing.

    Calling a shape-polymorphic program inside another function embeds it unrefined: only
    XLA's compile refines it, so whatever reads the caller's program before that (its
    pre-optimisation HLO: ``Lowered.compiler_ir("hlo")``) fails on its dynamic shapes. The
    static program is a ``jax.export`` of the call at ``specs`` whose module is replaced by its
    refined form (same signature, every shape static).
    """
    import dataclasses

    static = jax.export.export(jax.jit(exported.call), platforms=[platform])(*specs)
    try:
        from jax._src.interpreters import mlir

        refine = mlir.refine_polymorphic_shapes
    except (ImportError, AttributeError):
        return None
    with single_threaded_context():
        module = refine(parse_artifact(static.mlir_module_serialized))
        serialized = serialize_module(module)
    return dataclasses.replace(static, mlir_module_serialized=serialized), module


_LAPACK_SKIP = threading.local()


def _install_lapack_skip() -> None:
    """Wrap ``jax._src.export._export._ensure_backends_initialized`` (JAX 0.10.2) so that a
    program known to use no LAPACK custom calls does not pay ~0.14 s registering the LAPACK FFI
    handlers on its first call. Outside :func:`lapack_not_needed` it behaves as before."""
    from jax._src.export import _export

    original = _export._ensure_backends_initialized
    if getattr(original, "_nbcompile_wrapped", False):
        return

    def ensure(platforms: tuple[str, ...]) -> None:
        if getattr(_LAPACK_SKIP, "active", False):
            return
        original(platforms)

    ensure._nbcompile_wrapped = True  # type: ignore[attr-defined]
    _export._ensure_backends_initialized = ensure


@contextlib.contextmanager
def lapack_not_needed(custom_calls: Sequence[str]) -> Iterator[None]:
    """Skip LAPACK handler registration while lowering a program whose custom calls (checked
    against the allowlist at load) include no LAPACK target; a no-op otherwise."""
    if any("lapack" in target for target in custom_calls):
        yield
        return
    try:
        _install_lapack_skip()
    except (ImportError, AttributeError):  # another JAX version: nothing to skip
        yield
        return
    _LAPACK_SKIP.active = True
    try:
        yield
    finally:
        _LAPACK_SKIP.active = False


_REUSE_CONTEXT = threading.local()


def _install_context_reuse() -> None:
    """Wrap ``jax._src.interpreters.mlir.make_ir_context`` (JAX 0.10.2) so that, inside
    :func:`compile_lowered` on this thread, it returns the lowering's own context. Elsewhere it
    behaves as before."""
    from jax._src.interpreters import mlir

    original = mlir.make_ir_context
    if getattr(original, "_nbcompile_wrapped", False):
        return

    def make_ir_context() -> Any:
        context = getattr(_REUSE_CONTEXT, "context", None)
        return context if context is not None else original()

    make_ir_context._nbcompile_wrapped = True  # type: ignore[attr-defined]
    mlir.make_ir_context = make_ir_context


_REFINED_CHECK = threading.local()


def _install_refine_check() -> None:
    """Wrap ``jax._src.interpreters.mlir.refine_polymorphic_shapes`` (JAX 0.10.2, called by
    ``pxla`` just before XLA compiles a program with symbolic shapes) so that, inside
    :func:`compile_lowered` on this thread, the refined module is passed to a check first.
    Elsewhere it behaves as before."""
    from jax._src.interpreters import mlir

    original = mlir.refine_polymorphic_shapes
    if getattr(original, "_nbcompile_wrapped", False):
        return

    def refine(module: Any) -> Any:
        refined = original(module)
        check = getattr(_REFINED_CHECK, "check", None)
        if check is not None:
            check(refined)
        return refined

    refine._nbcompile_wrapped = True  # type: ignore[attr-defined]
    mlir.refine_polymorphic_shapes = refine


def compile_lowered(lowered: Any, check_refined: Callable[[Any], None] | None = None) -> Any:
    """``lowered.compile()``, with JAX's shape refinement parsing the refined module into the
    lowering's MLIR context instead of a new one.

    ``check_refined`` (for a program with symbolic shapes) is called on the refined module
    before XLA compiles it, and may raise to stop the compile (another JAX version: not
    called).

    A frozen program with a symbolic batch is refined when compiled
    (``mlir.refine_polymorphic_shapes``), which parses the refined module into a fresh context;
    creating one loads every dialect, ~2.5 ms of a small model's ~60 ms first call (measured
    on the 2-core machine). Any JAX context can hold the module. Another JAX version: a plain
    compile.
    """
    if check_refined is not None:
        try:
            _install_refine_check()
        except (ImportError, AttributeError):
            check_refined = None
    _REFINED_CHECK.check = check_refined
    try:
        try:
            _install_context_reuse()
            context = lowered.compiler_ir("stablehlo").context
        except (ImportError, AttributeError, NotImplementedError):
            return lowered.compile()
        _REUSE_CONTEXT.context = context
        try:
            return lowered.compile()
        finally:
            _REUSE_CONTEXT.context = None
    finally:
        _REFINED_CHECK.check = None
