"""Measure what compiling bought: eager vs compiled (``bench``) and per-optimisation ablation
(``ablate``). Results are JSON-serialisable (``to_json()``) with a short ``text()`` summary, for
the report's ``extras``.

    from nbcompile.measure import bench, ablate
    r = bench(fn, args, max_seconds=10.0)
    a = ablate(jax.jit(fn).lower(*args), args)
"""

from ._timing import Timing
from .ablate import AblationResult, VariantResult, ablate
from .bench import BenchResult, bench
from .passes import CHECKED_WITH, PASS_NAMES, PassName, Variant, passes_for, variants_for

__all__ = [
    "CHECKED_WITH",
    "PASS_NAMES",
    "AblationResult",
    "BenchResult",
    "PassName",
    "Timing",
    "Variant",
    "VariantResult",
    "ablate",
    "bench",
    "passes_for",
    "variants_for",
]
