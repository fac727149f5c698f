"""Every reach into jax._src / jaxlib internals that is not analysis-specific, with notes.

Analysis keeps its own internal reaches in ``analysis/_jax.py`` and the model adapters in
``capture/_models_scopes.py``; each names the JAX version it was checked on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

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

