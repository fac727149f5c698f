"""Every reach into jax._src / jaxlib internals that is not analysis-specific, with notes.

Also the one place that points file descriptor 2 elsewhere (native libraries such as libtpu
write warnings straight to it from C++). Analysis keeps its own internal reaches in ``analysis/_jax.py`` and the model adapters in
``capture/_models_scopes.py``; each names the JAX version it was checked on.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import io
import logging
import os
import sys
import tempfile
import threading
import time
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


def extension_session() -> Any | None:
    """The :class:`~nbcompile.session.Session` of the IPython shell running now, if it loaded
    ``nbcompile`` (found through IPython's magics registry); None outside IPython."""
    ipython_module = sys.modules.get("IPython")
    if ipython_module is None:
        return None  # IPython not even imported: plain Python
    shell = ipython_module.get_ipython()
    if shell is None:
        return None
    magics = shell.magics_manager.registry.get("CompileMagics")
    return getattr(magics, "session", None)


def _accelerator_files() -> bool:
    """A TPU VM exposes /dev/accel* (v2-v4) or /dev/vfio (v5e and later)."""
    return bool(glob.glob("/dev/accel*")) or os.path.isdir("/dev/vfio")


def _plugins_without_their_device() -> list[str]:
    """Accelerator plugins installed here whose device is absent (Linux, where they ship):
    libtpu (the ``[tpu]`` extra) without TPU device files, the CUDA plugin without a GPU."""
    if sys.platform != "linux":
        return []
    absent = []
    if importlib.util.find_spec("libtpu") is not None and not _accelerator_files():
        absent.append("tpu")
    cuda = ("jax_cuda12_plugin", "jax_cuda13_plugin")
    if any(importlib.util.find_spec(m) for m in cuda) and not glob.glob("/dev/nvidia[0-9]*"):
        absent.append("cuda")
    return absent


def quiet_backend_start() -> None:
    """On a machine whose only device is its CPU, start JAX on the CPU, quietly.

    With the ``[tpu]`` extra (libtpu) or the CUDA plugin installed on a machine without that
    device, JAX's first use tries those backends and fails: libtpu prints hostname errors and
    "Source Location Trace" blocks into the first cell that touches JAX, the CUDA plugin logs a
    traceback and is then not registered at all (so compiling for a GPU deviceless is refused),
    and libtpu loaded at start-up makes JAX's profiler crash the process (JAX 0.10.2). So at
    ``%load_ext``, where no TPU, NVIDIA or AMD device files exist and such a plugin is
    installed, JAX is told to run on the CPU (``jax_platforms="cpu"``), as the CUDA plugin's
    own deviceless recipe asks; deviceless TPU/GPU compiles still use the plugins' compilers.
    The start is done with fd 2 and JAX's plugin logger silenced. Nothing is done when the
    backends already started, when JAX_PLATFORMS is set, or when device files exist (a real
    TPU/GPU: JAX picks it, and its messages matter). Checked with JAX 0.10.2.
    """
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized() or os.environ.get("JAX_PLATFORMS"):
        return
    if _accelerator_files() or glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/dev/kfd"):
        return
    if not _plugins_without_their_device():
        return  # plain CPU JAX: nothing to quiet
    jax.config.update("jax_platforms", "cpu")
    # The CUDA plugin's failure is logged (with a traceback) by JAX's Python logger, which a
    # kernel sends to the cell's stderr, not to fd 2: silence that logger for the start too.
    log = logging.getLogger("jax._src.xla_bridge")
    level, propagate = log.level, log.propagate
    log.setLevel(logging.CRITICAL + 1)
    log.propagate = False
    try:
        with captured_stderr(), contextlib.redirect_stderr(io.StringIO()):
            jax.devices()
    finally:
        log.setLevel(level)
        log.propagate = propagate


class CapturedStderr:
    """What was written to fd 2 while the block ran (``text``, filled in on exit)."""

    text: str = ""


@contextlib.contextmanager
def captured_stderr() -> Iterator[CapturedStderr]:
    """Redirect fd 2 to a temporary file for the block; restore it even on error."""
    captured = CapturedStderr()
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no fd 2 (embedded interpreters): nothing to hide
        yield captured
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield captured
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            captured.text = sink.read().decode("utf-8", errors="replace")


def cell_files(shell: Any = None) -> dict[str, int] | None:
    """The kernel's cells as ``{cell file name: execution count}`` (IPython's compiler keeps
    this map, ``shell.compile._filename_map``, for its own tracebacks: IPython >= 8, checked
    with 9.18). ``shell`` defaults to the running IPython shell; None outside IPython or when
    the map moved. A live mapping: cells run later appear in it."""
    if shell is None:
        ipython = sys.modules.get("IPython")
        shell = ipython.get_ipython() if ipython is not None else None
    files = getattr(getattr(shell, "compile", None), "_filename_map", None)
    return files if isinstance(files, dict) else None


class EarlyHlo:
    """The pre-optimisation HLO text of a lowered program, converted while XLA compiles it.

    The analysis reads the program as XLA received it (op counts before optimisation, folding).
    JAX converts StableHLO to HLO in C++ *holding the GIL* (``Lowered.compiler_ir("hlo")``:
    ~0.45 s for a GPT-2-small train step, a third of the analysis), while XLA's compile releases
    the GIL and leaves part of the machine idle. So, started just before the compile, a thread
    waits until the compiling thread sits in XLA's compile (its innermost Python frame is JAX's
    ``backend_compile_and_load`` and has not moved for 20 ms: it is in C++), then converts the
    module's bytecode (serialised before the compile, on the compiling thread: the ``ir.Module``
    is not shared between threads). If the compile ends first (a cache hit, a short program),
    the thread does nothing and :meth:`text` returns None: the analysis converts as before.
    ``cpu_seconds`` is the thread's CPU time (analysis work done early). Checked with JAX 0.10.2
    (``jax._src.stages.Lowering.hlo`` does the same conversion).
    """

    POLL = 0.005  # seconds between looks at the compiling thread
    STILL = 0.02  # how long its frame must not move: it is in C++, not in Python

    def __init__(self, lowered: Any) -> None:
        from jax._src.interpreters import mlir

        self._bytecode = mlir.module_to_bytecode(lowered.compiler_ir("stablehlo"))
        self._tuple_args = bool(lowered._lowering.compile_args.get("tuple_args", False))
        self._caller = threading.get_ident()
        self._over = threading.Event()
        self._result: tuple[str | None, BaseException | None] | None = None
        self.cpu_seconds = 0.0
        self._thread = threading.Thread(target=self._run, name="nbcompile-early-hlo", daemon=True)
        self._thread.start()

    def _in_compile(self) -> bool:
        """The compiling thread has been inside XLA's compile for ``STILL`` seconds."""
        last, since = None, 0.0
        while not self._over.wait(self.POLL):
            frame = sys._current_frames().get(self._caller)
            if frame is None or frame.f_code.co_name != "backend_compile_and_load":
                last = None
                continue
            here, now = (id(frame), frame.f_lasti), time.perf_counter()
            if here != last:
                last, since = here, now
            elif now - since >= self.STILL:
                return True
        return False

    def _run(self) -> None:
        if not self._in_compile():
            self._bytecode = b""  # not needed: the analysis converts itself, if it is asked
            return
        from jax._src.lib import _jax

        with contextlib.suppress(AttributeError, OSError):  # Linux: one thread's own niceness
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)

        t0 = time.thread_time()
        try:
            computation = _jax.mlir.mlir_module_to_xla_computation(
                self._bytecode, use_tuple_args=self._tuple_args
            )
            self._result = (computation.as_hlo_module().to_string(), None)
        except BaseException as exc:  # handed to the analysis, raised there
            self._result = (None, exc)
        finally:
            self.cpu_seconds = time.thread_time() - t0
            self._bytecode = b""

    def compile_done(self) -> None:
        """The compile returned: a thread still waiting for it gives up."""
        self._over.set()

    def text(self) -> str | None:
        """The converted text (waits for a conversion under way), once; None where the thread
        did not convert (the caller converts itself). A conversion error is raised here."""
        self._over.set()
        self._thread.join()
        result, self._result = self._result, None
        if result is None:
            return None
        if result[1] is not None:
            raise result[1]
        return result[0]
