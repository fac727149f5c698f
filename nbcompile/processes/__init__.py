"""Many processes: ``%%compile`` under multi-controller JAX (``jax.distributed``).

    rc = nbcompile.cluster(2)        # two local ipyparallel engines = JAX processes 0 and 1
    %%px
    %%compile
    loss(params, batch)              # traced, compiled and bound on every process

:func:`cluster` starts local engines with ``jax.distributed`` initialised (CPU, gloo);
:func:`agree` is what the session asks before binding: the processes compare program
fingerprints through ``jax.distributed``'s key-value store and refuse a program that differs
(``NBC800``), a process that does not come (``NBC801``) or sends what this nbcompile cannot
read (``NBC804``, checked in ``_schema``); :func:`gather_profiles` puts every
process's ``--profile`` side by side (``c.profile.processes``). See ``docs/processes.md``.
"""

from __future__ import annotations

from ._agree import ProcessInfo, agree, fingerprint
from ._cluster import (
    DEFAULT_TIMEOUT,
    HANGING_JAXLIBS,
    TIMEOUT_ENV,
    TRY_ANYWAY_ENV,
    cluster,
    collectives_hang,
    process_timeout,
)
from ._profiles import KernelSpread, ProcessProfile, ProcessProfiles, gather_profiles
from ._view import one_line, processes_view

__all__ = [
    "DEFAULT_TIMEOUT",
    "HANGING_JAXLIBS",
    "TIMEOUT_ENV",
    "TRY_ANYWAY_ENV",
    "KernelSpread",
    "ProcessInfo",
    "ProcessProfile",
    "ProcessProfiles",
    "agree",
    "cluster",
    "collectives_hang",
    "fingerprint",
    "gather_profiles",
    "one_line",
    "process_timeout",
    "processes_view",
]
