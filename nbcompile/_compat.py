"""Every reach into jax._src / jaxlib internals that is not analysis-specific, with notes.

Analysis keeps its own internal reaches in ``analysis/_jax.py`` and the model adapters in
``capture/_models_scopes.py``; each names the JAX version it was checked on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
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


def stablehlo_ops(module: Any) -> tuple[int, list[str]]:
    """(operation count, custom-call targets) of an MLIR module, walked without printing it.

    Counted: every ``stablehlo.*`` / ``chlo.*`` operation except ``stablehlo.return`` (region
    bodies included). The one definition behind every "StableHLO ops" figure nbcompile shows
    (a compiled cell's summary and a frozen program), so the two can be compared.
    """
    from jax._src.lib.mlir import ir

    ops, targets = 0, []

    def visit(op: Any) -> Any:
        nonlocal ops
        name = op.name
        if name.startswith(("stablehlo.", "chlo.")) and name != "stablehlo.return":
            ops += 1
            if name == "stablehlo.custom_call":
                targets.append(ir.StringAttr(op.attributes["call_target_name"]).value)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return ops, targets

