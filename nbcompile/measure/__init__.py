"""Measure what compiling bought: eager vs compiled (``bench``), per-optimisation ablation
(``ablate``) and where the time of a call goes (``profile``). Results are JSON-serialisable
(``to_json()``) with a short ``text()`` summary, for the report's ``extras``.

    from nbcompile.measure import bench, ablate, profile
    r = bench(fn, args, max_seconds=10.0)
    a = ablate(jax.jit(fn).lower(*args), args)
    p = profile(nbcompile.compile(fn, *args), calls=20)
    spec_peaks("tpu", "v5e")  # a device's datasheet roofline (FLOP/s, bytes/s, cited)
"""

from ._loops import LoopTime
from ._peaks import spec_peaks
from ._timing import Timing
from .ablate import AblationResult, VariantResult, ablate
from .bench import BenchResult, bench
from .passes import CHECKED_WITH, PASS_NAMES, PassName, Variant, passes_for, variants_for
from .profile import KernelTime, Profile, ProfileDelta, calibrate, profile, profile_delta

__all__ = [
    "CHECKED_WITH",
    "PASS_NAMES",
    "AblationResult",
    "BenchResult",
    "KernelTime",
    "LoopTime",
    "PassName",
    "Profile",
    "ProfileDelta",
    "Timing",
    "Variant",
    "VariantResult",
    "ablate",
    "bench",
    "calibrate",
    "passes_for",
    "profile",
    "profile_delta",
    "spec_peaks",
    "variants_for",
]
