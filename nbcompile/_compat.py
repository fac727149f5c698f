"""Every reach into jax._src / jaxlib internals that is not analysis-specific, with notes.

Analysis keeps its own internal reaches in ``analysis/_jax.py`` and the model adapters in
``capture/_models_scopes.py``; each names the JAX version it was checked on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import jax


@contextlib.contextmanager
def persistent_cache_disabled() -> Iterator[None]:
    """Compile without JAX's persistent compilation cache, then restore it.

    Needed for deviceless compiles: an executable that libtpu (or the CUDA plugin) stored
    cannot be read back without a device client ("PjRtCompiler must be constructed with a
    Client"), so reading the cache fails the compile. JAX decides once per process whether the
    cache is used (``compilation_cache.is_cache_used`` is memoised); ``reset_cache`` makes it
    decide again. Checked with JAX 0.10.2.
    """
    from jax._src import compilation_cache

    old = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", old)
        compilation_cache.reset_cache()


def pre_optimisation_hlo_job(lowered: Any) -> Callable[[], str] | None:
    """A job producing the pre-optimisation HLO text (with metadata) that may run in another
    thread while XLA compiles.

    ``lowered.compiler_ir("hlo")`` serialises the shared MLIR module and converts it; here the
    serialisation happens now, in the caller's thread, and the job converts its own copy of
    the bytes (no shared MLIR state). Mirrors ``jax._src.stages.Lowering.hlo`` (JAX 0.10.2).
    Returns None where the lowering does not have that shape (then analysis does it itself).
    """
    try:
        from jax._src.interpreters import mlir
        from jax._src.lib import _jax

        lowering = lowered._lowering
        data = mlir.module_to_bytecode(lowering.stablehlo())
        tuple_args = lowering.compile_args["tuple_args"]
    except Exception:  # another JAX version: fall back to compiler_ir in the main thread
        return None

    def job() -> str:
        comp = _jax.mlir.mlir_module_to_xla_computation(data, use_tuple_args=tuple_args)
        return comp.as_hlo_module().to_string()

    return job
