"""Run JAX's native code on an untrusted program in a forked child first, with a time limit.

JAX's StableHLO/MLIR readers and passes are native code written for trusted input: the loader
fuzz found byte-flipped programs (with valid digests) on which
``deserialize_portable_artifact`` loops forever, and one that passes every parse check but
crashes JAX's shape refinement (``refine_polymorphic_shapes``) at its first call. A native
loop or crash cannot be interrupted from Python, so the first parse of a file's program, and
the first lowering and shape refinement of a program from elsewhere at each input shape,
happen in a ``fork`` of this process: if the child crashes or overruns its time limit it is
killed and the file refused (NBC500); only what the child got through is done again here
(parsing, lowering and refinement are deterministic). Where ``fork`` is unavailable (Windows)
the work runs in-process.
"""

from __future__ import annotations

import faulthandler
import gc
import json
import os
import select
import signal
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

from nbcompile.errors import FreezeError

PARSE_TIMEOUT_S = 20.0


def timeout_for(program_bytes: int) -> float:
    """The child's time limit for a program of ``program_bytes``: ``PARSE_TIMEOUT_S`` (read at
    call time) plus one second per 10 MB (large constants-mode programs take longer to read
    and lower)."""
    return PARSE_TIMEOUT_S + program_bytes / 10e6


def _refuse(message: str) -> FreezeError:
    return FreezeError(f"program section {message}", code="NBC500")


def _read_all(fd: int, deadline: float) -> bytes | None:
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def run_isolated(
    parse: Callable[[], dict[str, Any]],
    timeout: float | None = None,
    *,
    what: str = "the StableHLO reader",
) -> dict[str, Any]:
    """Run ``parse`` (returning a JSON-able dict) in a forked child; refuse on crash/timeout.

    ``timeout`` defaults to the module's ``PARSE_TIMEOUT_S`` at call time; ``what`` names the
    native code the child runs, for the refusal's message.
    """
    timeout = PARSE_TIMEOUT_S if timeout is None else timeout
    if not hasattr(os, "fork") or os.environ.get("NBCOMPILE_FREEZE_NO_FORK") == "1":
        return parse()
    read_fd, write_fd = os.pipe()
    with warnings.catch_warnings():
        # JAX warns at every fork that threads may deadlock the child; the child touches no
        # XLA state and a deadlock would end as a timeout.
        warnings.simplefilter("ignore")
        pid = os.fork()
    if pid == 0:  # child: parse, report, exit without running any parent cleanup
        # A garbage collection here would touch every object of the (large) parent heap and
        # copy its pages (copy-on-write): tens of milliseconds for nothing in a process that
        # exits in a moment.
        gc.disable()
        # a crash here is an answer (the file is refused), not something to dump on stderr
        faulthandler.disable()
        status = 0
        try:
            os.close(read_fd)
            try:
                from nbcompile.frozen import _jaxcompat

                # the inherited MLIR thread pool has no threads here (see the function)
                _jaxcompat.fresh_mlir_thread_pool()
                payload = parse()
            except Exception as err:  # report any reader error to the parent
                payload = {"error": f"{type(err).__name__}: {str(err)[:300]}"}
            data = json.dumps(payload).encode()
            view = memoryview(data)
            while view:
                view = view[os.write(write_fd, view) :]
            os.close(write_fd)  # the parent sees the end now, not after this process's teardown
        except BaseException:
            status = 1
        finally:
            os._exit(status)
    os.close(write_fd)
    try:
        data = _read_all(read_fd, time.monotonic() + timeout)
    finally:
        os.close(read_fd)
    if data is None:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise _refuse(f"did not get through {what} within {timeout:.0f} s")
    try:
        result = json.loads(data) if data else None
    except ValueError:
        result = None
    if isinstance(result, dict):
        # A complete answer: reap the child in the background (tearing down a fork of a large
        # process takes milliseconds the caller need not wait for).
        threading.Thread(target=os.waitpid, args=(pid, 0), daemon=True).start()
        return result
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        raise _refuse(f"crashed {what} (signal {os.WTERMSIG(status)})")
    raise _refuse(f"got no answer from {what}")
