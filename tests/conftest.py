"""Test configuration: CPU only, strict JAX, no network."""

from __future__ import annotations

import os
import tempfile

# libtpu may be installed (nbcompile[tpu]) on a machine with no TPU: keep JAX on the CPU and let
# deviceless TPU compiles go through topologies explicitly.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# JAX's persistent compilation cache (switched on by %load_ext nbcompile): one fresh folder per
# test session, shared with the kernels the tests start, never the user's own cache.
os.environ.setdefault("NBCOMPILE_CACHE_DIR", tempfile.mkdtemp(prefix="nbcompile-test-cache-"))

import jax
import pytest

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")
# In this process the cache is on from the start and keeps *every* compile (nbcompile keeps
# those over 0.2 s, so which ones depends on how busy the machine is): each test meets the
# cache as on the busiest machine that ran everything before, whatever the load or order.
# (%load_ext nbcompile leaves a cache folder that is already set alone.)
jax.config.update("jax_compilation_cache_dir", os.environ["NBCOMPILE_CACHE_DIR"])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)


def pytest_collection_modifyitems(config, items):
    """Tests that start JAX's profiler (``--profile``) run first: once a deviceless TPU compile
    has loaded libtpu into the test process, starting the profiler would crash it (JAX 0.10.2),
    so nbcompile refuses to. The sort is stable: every other order is kept."""

    def first(item: pytest.Item) -> bool:
        path, _, name = item.nodeid.partition("::")
        in_process = not path.startswith("tests/notebooks/")  # a notebook has its own kernel
        named = "test_profile" in path or (in_process and "profile" in name.lower())
        return named or item.get_closest_marker("profiler") is not None

    items.sort(key=lambda item: not first(item))
    # Tutorial 12 and its claims start engines: cluster tests, like tests/test_cluster*.py.
    for item in items:
        if "_hold[12_many_processes]" in item.nodeid or "_its_cause[12-" in item.nodeid:
            item.add_marker(pytest.mark.cluster)
    # A jaxlib whose collectives hang in engines is refused by nbcompile.cluster (NBC803,
    # tests/test_cluster.py checks the refusal): the cluster tests run on the oldest stack
    # (`make test-compat`), which every `.ci/run` runs too.
    from nbcompile.processes import collectives_hang

    hangs = collectives_hang()
    if hangs is not None:
        skip = pytest.mark.skip(
            reason=f"jaxlib {hangs}: nbcompile.cluster refuses it (collectives hang in "
            "engines); these run in `make test-compat`"
        )
        for item in items:
            if item.get_closest_marker("cluster") is not None:
                item.add_marker(skip)


@pytest.fixture
def relaxed_dtypes():
    """For third-party model libraries that rely on standard dtype and rank promotion."""
    jax.config.update("jax_numpy_dtype_promotion", "standard")
    jax.config.update("jax_numpy_rank_promotion", "allow")
    yield
    jax.config.update("jax_numpy_dtype_promotion", "strict")
    jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture(scope="session")
def shell():
    """One real IPython InteractiveShell with nbcompile loaded (reset per test by users)."""
    from IPython.testing.globalipapp import start_ipython

    ip = start_ipython()
    ip.run_line_magic("load_ext", "nbcompile")
    yield ip
    ip.run_line_magic("unload_ext", "nbcompile")
