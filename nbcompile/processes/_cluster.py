"""``nbcompile.cluster(n)``: ``n`` local ipyparallel engines, each one JAX process.

Each engine is an IPython kernel; on each, JAX starts on the CPU with gloo collectives and
``jax.distributed.initialize`` joins process ``i`` (engine ``i``) to a coordinator on
localhost, and ``%load_ext nbcompile`` makes ``%%compile`` available under ``%%px``. The same
set-up on real hosts is one engine per host and the host's address as coordinator
(``docs/processes.md``).
"""

from __future__ import annotations

import os
import socket
from typing import Any

from ..errors import TargetError

__all__ = [
    "DEFAULT_TIMEOUT",
    "HANGING_JAXLIBS",
    "TIMEOUT_ENV",
    "TRY_ANYWAY_ENV",
    "cluster",
    "collectives_hang",
    "process_timeout",
]

#: environment variable: seconds a process waits for the others' programs before NBC801
TIMEOUT_ENV = "NBCOMPILE_PROCESS_TIMEOUT"
DEFAULT_TIMEOUT = 60.0
#: jaxlib versions whose CPU collectives hang inside IPython kernels (the engines): the first
#: program that crosses processes never returns (measured with plain ipykernel kernels and
#: ipyparallel engines, plain jax.jit, no nbcompile; the same program in plain Python processes
#: returns at once); cluster() refuses them with NBC803
HANGING_JAXLIBS = {"0.12.1"}
#: environment variable: "1" starts engines on such a jaxlib anyway (to check a fix)
TRY_ANYWAY_ENV = "NBCOMPILE_CLUSTER_ANYWAY"


def collectives_hang() -> str | None:
    """The installed jaxlib's version where its collectives hang in engines, else None."""
    import jax

    version = jax.lib.__version__
    if version in HANGING_JAXLIBS and os.environ.get(TRY_ANYWAY_ENV) != "1":
        return version
    return None


def process_timeout() -> float:
    """Seconds a process waits for the other processes at a ``%%compile`` (``$NBCOMPILE_PROCESS_
    TIMEOUT``, else 60)."""
    try:
        value = float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT))
    except ValueError:
        return DEFAULT_TIMEOUT
    return value if 0 < value < 86400 else DEFAULT_TIMEOUT


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _in_ipython() -> bool:
    """Whether an IPython shell runs here (then ``%px`` / ``%%px`` are registered)."""
    import builtins

    get = getattr(builtins, "get_ipython", None)
    return get is not None and get() is not None


def _join(
    address: str, n: int, index: int, devices: int, timeout: float, start: float, parent: int
) -> dict[str, Any]:
    """Run on engine ``index`` (sent by ipyparallel, so self-contained): start JAX as process
    ``index`` of ``n`` and load nbcompile's ``%%compile``; the engine ends itself once the
    process that started it (``parent``: a notebook's kernel, a test) is gone."""
    import os
    import threading
    import time

    def watch() -> None:
        while True:
            time.sleep(1.0)
            try:
                os.kill(parent, 0)
            except ProcessLookupError:
                os._exit(0)  # nobody can reach this engine any more
            except PermissionError:
                pass

    threading.Thread(target=watch, name="nbcompile-parent-watch", daemon=True).start()

    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ["NBCOMPILE_PROCESS_TIMEOUT"] = str(timeout)
    if devices > 1:
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={devices}"
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        address, num_processes=n, process_id=index, initialization_timeout=int(start)
    )
    from jax.experimental import multihost_utils

    # the processes meet once through a collective: gloo connects them now, not in a user's cell
    multihost_utils.sync_global_devices("nbcompile.cluster")
    import sys

    ipython = sys.modules.get("IPython")  # an engine is an IPython kernel: loaded already
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is not None:
        shell.run_line_magic("load_ext", "nbcompile")
        shell.user_ns.setdefault("jax", jax)
    return {"process": jax.process_index(), "devices": jax.device_count()}


def cluster(
    n: int,
    *,
    devices_per_process: int = 1,
    timeout: float = DEFAULT_TIMEOUT,
    start_timeout: float = 300.0,
) -> Any:
    """Start ``n`` local ipyparallel engines, engine ``i`` being JAX process ``i`` (CPU, gloo
    collectives, a coordinator on a free localhost port), each with ``%%compile`` loaded, and
    return the connected ``ipyparallel.Client``.

    ``devices_per_process``: CPU devices each process addresses; ``timeout``: seconds each
    ``%%compile`` waits for the other processes before ``NBC801``; ``start_timeout``: seconds
    the engines may take to start and join (else ``NBC803``, the engines stopped).

    Stop them with ``rc.shutdown(targets="all", block=True)`` (the engines end at once) and
    ``rc.cluster.stop_cluster_sync()`` (the controller; alone it waits for the engines and kills
    them).
    """
    if not isinstance(n, int) or n < 1:
        raise TargetError(
            f"cluster({n!r}): the number of processes must be a whole number ≥ 1",
            code="NBC803",
            hint="e.g. nbcompile.cluster(2)",
        )
    hangs = collectives_hang()
    if hangs is not None:
        raise TargetError(
            f"cluster({n}): jaxlib {hangs}'s CPU collectives hang inside IPython kernels, so "
            "the engines' first program across processes would never return",
            code="NBC803",
            hint="for many processes install jax and jaxlib 0.12.0.1 "
            "(pip install 'jax==0.12.0.1' 'jaxlib==0.12.0.1'); one process is not affected",
        )
    try:
        import ipyparallel as ipp
    except ImportError as exc:
        raise TargetError(
            "nbcompile.cluster needs ipyparallel, which is not installed",
            code="NBC803",
            hint='pip install "nbcompile[cluster]"',
        ) from exc
    handle = ipp.Cluster(n=n, engine_timeout=int(start_timeout))
    try:
        rc = handle.start_and_connect_sync(activate=_in_ipython())
        rc.cluster = handle
        ids = sorted(rc.ids)[:n]
        address = f"127.0.0.1:{_free_port()}"
        pending = [
            rc[eid].apply_async(
                _join,
                address,
                n,
                i,
                devices_per_process,
                float(timeout),
                float(start_timeout),
                os.getpid(),
            )
            for i, eid in enumerate(ids)
        ]
        for result in pending:
            result.get(timeout=start_timeout)
    except (ipp.error.IPythonError, TimeoutError, OSError) as exc:
        handle.stop_cluster_sync()
        raise TargetError(
            f"cluster({n}): the engines did not start as JAX processes: {_short(exc)}",
            code="NBC803",
            hint="check that `python -c 'import jax, ipyparallel'` works here; a busy machine "
            "may need a longer start_timeout=",
        ) from exc
    except BaseException:
        handle.stop_cluster_sync()
        raise
    return rc


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[-1][:200] if text else type(exc).__name__
