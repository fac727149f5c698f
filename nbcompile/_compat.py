"""Every reach into jax._src / jaxlib internals that is not analysis-specific, with notes.

Also the one place that points file descriptor 2 elsewhere (native libraries such as libtpu
write warnings straight to it from C++). Analysis keeps its own internal reaches in ``analysis/_jax.py`` and the model adapters in
``capture/_models_scopes.py``; each names the JAX version it was checked on.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import hashlib
import importlib.util
import io
import itertools
import logging
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np


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


_FRESH = itertools.count()  # see compile_fresh


def compile_fresh(lowered: Any, compiler_options: dict[str, Any] | None = None) -> Any:
    """``lowered.compile(compiler_options)`` with XLA really compiling: not served by JAX's
    persistent cache, nor by its in-memory cache of this ``Lowered`` (keyed on the options: a
    no-op debug option, ``xla_dump_max_hlo_modules``, which dumps nothing without
    ``xla_dump_to``, makes the key new: a value of its own for each call, any negative one
    meaning no limit, so a second fresh compile of one ``Lowered`` is not served by the first's
    entry while that lives). For figures that need a compile: its time, a fresh executable's
    metadata. Checked with JAX 0.10.2 and 0.12."""
    fresh = -1 - next(_FRESH)
    options = {"xla_dump_max_hlo_modules": fresh, **(compiler_options or {})}
    with persistent_cache_disabled():
        return lowered.compile(compiler_options=options)


def adopt_executable(lowered: Any, compiled: Any) -> None:
    """Make ``compiled`` (compiled from ``lowered`` with extra compiler options, such as XLA's
    dump) the executable later calls of the jit object run, as a plain ``lowered.compile()``'s
    would be.

    ``Lowered.compile(compiler_options=...)`` does not keep its executable on the lowering
    (only an option-less compile does, ``MeshComputation._executable``), and a call of the jit
    object compiles again when it finds none there: a second XLA compile of the same program.
    The call reuses the ``MeshComputation`` of ``jitted.trace(...).lower()`` (its lowering is
    cached), so setting its ``_executable`` to ``compiled``'s serves the call. Only done when no
    executable is kept yet; a no-op on another JAX lacking these attributes. Checked with JAX
    0.10.2 (tests/measure/test_passes_once.py counts the compiles)."""
    lowering = getattr(lowered, "_lowering", None)
    executable = getattr(compiled, "_executable", None)
    if lowering is None or executable is None or not hasattr(lowering, "_executable"):
        return
    if lowering._executable is None:
        lowering._executable = executable


def reuse_executable(lowered: Any, compiled: Any, text: str) -> Any | None:
    """``lowered.compile()`` served by ``compiled``'s executable, without XLA: for a lowering
    whose program is ``compiled``'s (the same module but for source locations, the same
    arguments, devices and options: nbcompile/stages/key.py). The executable is set on the
    lowering (``MeshComputation._executable``, which ``compile()`` returns when set and asked
    for no options), then compiled; the new ``Compiled``'s ``as_text()`` gives ``text`` (the
    executable's HLO with this lowering's source rows, nbcompile/stages/relocate.py), so
    whoever reads it — the analysis, you — reads this program's lines. None where this JAX
    keeps the executable elsewhere. Checked with JAX 0.10.2 and 0.12.0.1 (``Compiled`` has a
    ``__dict__`` beside its ``__slots__``)."""
    lowering = getattr(lowered, "_lowering", None)
    executable = getattr(compiled, "_executable", None)
    if lowering is None or executable is None or getattr(lowering, "_executable", 1) is not None:
        return None
    lowering._executable = executable
    out = lowered.compile()
    if getattr(out, "_executable", None) is not executable:
        return None
    try:
        out.as_text = lambda *_args, **_kwargs: text
    except AttributeError:
        return None
    return out


#: Debug options that make XLA write files (``xla_dump_to``): JAX leaves them out of its
#: persistent-cache key, so a compile that asks for a dump could be served without XLA running.
_DUMP_OPTIONS = ("xla_dump_to",)
_FILE_REF = re.compile(r'"([^"]*)":(\d+)')  # a file:line in MLIR's location syntax
# (file normaliser, caller test), once the rules are installed
_KEYED: list[tuple[Callable[[str], str], Callable[[str], bool] | None]] = []


def _asks_for_dump(options: Any) -> bool:
    """Whether a compile's options (or ``XLA_FLAGS``) ask XLA to dump files."""
    debug = options.executable_build_options.debug_options
    if debug.xla_dump_to:
        return True
    if any(name in _DUMP_OPTIONS and value for name, value in options.env_option_overrides):
        return True
    return "--xla_dump_to=" in os.environ.get("XLA_FLAGS", "")


_ALIAS_REF = re.compile(r"#loc\d*\b")
_NAME_LOC = re.compile(r'"((?:[^"\\]|\\.)*)"(?:\((#loc\d*)\))?$')
_FILE_LOC = re.compile(r'"((?:[^"\\]|\\.)*)":(\d.*)$')
_CALLSITE = re.compile(r"callsite\((#loc\d*) at (#loc\d*)\)$")


class _Locations:
    """The location aliases of a printed module (``#loc12 = loc(...)``), each as canonical
    text: cell files through ``normalize``; call stacks cut at the first frame ``cut`` names
    (the frames from there on called the program: nbcompile's tracing frames and whatever
    called nbcompile — pytest, a script, IPython's machinery)."""

    def __init__(
        self, aliases: dict[str, str], normalize: Callable[[str], str], cut: Callable[[str], bool]
    ) -> None:
        self.aliases, self.normalize, self.cut = aliases, normalize, cut
        self.text: dict[str, str] = {}
        self.frames: dict[str, list[tuple[str, bool]]] = {}
        self.files: dict[str, tuple[str, bool]] = {}

    def file(self, name: str) -> tuple[str, bool]:
        known = self.files.get(name)
        if known is None:
            known = self.files[name] = (self.normalize(name), self.cut(name))
        return known

    def stack(self, ref: str) -> list[tuple[str, bool]]:
        """The frames of alias ``ref``, innermost first: (text, called the program)."""
        known = self.frames.get(ref)
        if known is not None:
            return known
        body = self.aliases.get(ref, ref)
        site = _CALLSITE.match(body)
        if site:
            out = self.stack(site.group(1)) + self.stack(site.group(2))
        else:
            frame = _FILE_LOC.match(body)
            named = _NAME_LOC.match(body) if frame is None else None
            if frame is not None:
                shown, ours = self.file(frame.group(1))
                out = [(f'"{shown}":{frame.group(2)}', ours)]
            elif named is not None and named.group(2) is not None:
                child = named.group(2)
                if _FILE_LOC.match(self.aliases.get(child, "")):
                    # a frame: its function's name around its file:line
                    ((text, ours),) = self.stack(child)
                    out = [(f'"{named.group(1)}"({text})', ours)]
                else:  # an operation's name around a call stack
                    out = [(f'"{named.group(1)}"({self.of(child)})', False)]
            else:
                out = [(_ALIAS_REF.sub(lambda m: self.of(m.group(0)), body), False)]
        self.frames[ref] = out
        return out

    def of(self, ref: str) -> str:
        """Canonical text of alias ``ref``: its frames up to the first that called the
        program."""
        known = self.text.get(ref)
        if known is None:
            kept = []
            for text, ours in self.stack(ref):
                if ours:
                    break
                kept.append(text)
            known = self.text[ref] = " at ".join(kept)
        return known


def location_digest(
    module: Any, normalize: Callable[[str], str], cut: Callable[[str], bool] | None = None
) -> str:
    """A digest of every source location of an MLIR module, as the view reads them.

    The module is printed with its debug information (operations refer to location aliases,
    ``loc(#loc12)``, defined on ``#loc12 = loc(...)`` lines). Each alias is read as a call
    stack (``callsite(frame at callers)``) of frames (``"function"("file":line:column)``):
    a file through ``normalize`` (a notebook cell's file by its content hash, which a new
    kernel keeps), and the stack cut at the first frame whose file ``cut`` names, since what
    called the traced code (nbcompile, IPython, a test or a script, which JAX also records)
    is no part of the program. Equal digests mean equal (normalised) files, lines, columns and
    functions of every operation's user frames. Checked with JAX 0.10.2 and 0.12.0.1 (the
    MLIR location syntax above).
    """
    # constants elided: the program's digest covers them (a 16 MB table prints 33 MB)
    asm = module.operation.get_asm(enable_debug_info=True, large_elements_limit=16)
    body, aliases = [], {}
    for line in asm.split("\n"):
        if line.startswith("#loc"):
            name, _, value = line.partition(" = ")
            aliases[name] = value[4:-1] if value.startswith("loc(") else value
        else:
            body.append(line)
    files: dict[str, str] = {}

    def norm(match: re.Match[str]) -> str:  # a location printed in place, not as an alias
        file = match.group(1)
        shown = files.get(file)
        if shown is None:
            shown = files[file] = normalize(file)
        return f'"{shown}":{match.group(2)}'

    text = _FILE_REF.sub(norm, "\n".join(body))
    table = _Locations(aliases, normalize, cut or (lambda _file: False))
    text = _ALIAS_REF.sub(lambda m: table.of(m.group(0)), text)
    return hashlib.sha256(text.encode()).hexdigest()


def key_persistent_cache_by_locations(
    normalize: Callable[[str], str], cut: Callable[[str], bool] | None = None
) -> bool:
    """Make JAX's persistent compilation cache give what a fresh compile gives (idempotent);
    False where this JAX has no ``jax._src.compiler._get_cache_key`` to wrap (then nbcompile
    does not switch the cache on: :func:`persistent_cache_keyed`).

    JAX keys an executable on the lowered module *without* its debug information
    (``cache_key._canonicalize_ir`` strips locations), so a cell edited above the model's code
    (a docstring: every line moves down) is served the old executable, whose HLO metadata names
    the old lines; and it leaves ``xla_dump_to`` out of the key, so a compile asking for a dump
    can be served without XLA running (no dump is written). Wrapped here, in
    ``compiler._get_cache_key`` (looked up on each compile, called with keyword arguments
    ``backend``, ``computation``, ``devices``): a key also covers :func:`location_digest` of
    the module (``normalize`` and ``cut`` as there), so a moved line misses the cache while a
    re-run or a new kernel (other cell file names, same content) still hits; and a compile that
    asks for a dump gets no key (JAX then neither reads nor writes the cache). Costs one print of the module with locations,
    constants elided, only when XLA is asked to compile (nbcompile's own cache, keyed on the
    same module, serves re-runs before that): 10,800 StableHLO ops, 45 ms on a quiet 2-core
    machine, 140 ms under heavy load, where a hit of that program took 1.5-2.4 s and a compile
    6-7.6 s. Checked with JAX 0.10.2 and 0.12.0.1 (tests/test_persistent_cache.py names this
    reach when it fails).
    """
    from jax._src import compiler

    if _KEYED:
        _KEYED[0] = (normalize, cut)
        return True
    original = getattr(compiler, "_get_cache_key", None)
    if original is None:
        return False
    _KEYED.append((normalize, cut))

    @functools.wraps(original)
    def keyed(options: Any, *args: Any, **kwargs: Any) -> str | None:
        if _asks_for_dump(options):
            return None
        key = original(options, *args, **kwargs)
        module = kwargs.get("computation", args[1] if len(args) > 1 else None)
        if key is None or module is None:
            return key
        digest = location_digest(module, *_KEYED[0])
        name, _, rest = key.rpartition("-")
        return f"{name}-{hashlib.sha256((rest + digest).encode()).hexdigest()}"

    keyed.nbcompile_keyed = True  # type: ignore[attr-defined]
    compiler._get_cache_key = keyed
    return True


def persistent_cache_keyed() -> bool:
    """Whether JAX's persistent cache is keyed by locations here (the wrapper of
    :func:`key_persistent_cache_by_locations` is what JAX calls for a key)."""
    from jax._src import compiler

    return bool(getattr(getattr(compiler, "_get_cache_key", None), "nbcompile_keyed", False))


def module_bytecode(lowered: Any) -> bytes:
    """The lowered StableHLO module as MLIR bytecode: every operation, constant and source
    location (file, line, column, function name of each frame), serialised in C++ (a GPT-2-small
    train step: ~20 ms, where printing it takes ~200 ms). Checked with JAX 0.10.2 and 0.12.0.1
    (``jax._src.interpreters.mlir.module_to_bytecode``)."""
    from jax._src.interpreters import mlir

    return bytes(mlir.module_to_bytecode(lowered.compiler_ir("stablehlo")))


def stripped_bytecode(lowered: Any) -> bytes:
    """The lowered module's bytecode without its source locations (a clone run through MLIR's
    ``strip-debuginfo`` pass, as JAX's own persistent-cache key does in
    ``cache_key._canonicalize_ir``): equal for two programs that differ only in where their code
    is. Checked with JAX 0.10.2 and 0.12.0.1."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import passmanager

    module = lowered.compiler_ir("stablehlo")
    with module.context:
        clone = module.operation.clone()
        passmanager.PassManager.parse("builtin.module(strip-debuginfo)").run(clone)
        return bytes(mlir.module_to_bytecode(clone))


#: JAX options that change what XLA makes of a module without appearing in it
_COMPILE_CONFIG = (
    "jax_compiler_enable_remat_pass",
    "jax_default_device",
    "jax_disable_most_optimizations",
    "jax_enable_pgle",
    "jax_exec_time_optimization_effort",
    "jax_experimental_unsafe_xla_runtime_errors",
    "jax_memory_fitting_effort",
    "jax_optimization_level",
    "jax_pgle_profiling_runs",
    "jax_xla_profile_version",
)


def lowering_facts(lowered: Any) -> tuple[str, bool]:
    """(what shapes the executable besides the module's text, whether it is cacheable).

    The text: the arguments' and results' pytree structure, shardings, layouts and donation,
    the devices and platform, the constants JAX passes beside the module (``const_args``, by
    content), ``XLA_FLAGS`` and the JAX options in :data:`_COMPILE_CONFIG`. Not cacheable: a
    program that calls back into Python (``jax.pure_callback``, ``jax.debug.print``,
    ``io_callback``): its module names the callback by index only (``xla_ffi_python_cpu_callback``
    with ``index = 0``), so the same module can call another Python function; such a program is
    compiled on every run. Read from ``Lowered._lowering.compile_args`` (checked with JAX 0.10.2
    and 0.12.0.1: ``in_shardings``, ``out_shardings``, ``in_layouts``, ``out_layouts``,
    ``num_devices``, ``kept_var_idx``, ``host_callbacks``, ``backend``) and ``const_args``."""
    lowering = getattr(lowered, "_lowering", None)
    args = dict(getattr(lowering, "compile_args", None) or {})
    backend = args.get("backend")
    parts = [
        repr(lowered.in_tree),
        repr(lowered.out_tree),
        repr([getattr(a, "donated", None) for a in jax.tree_util.tree_leaves(lowered.args_info)]),
        getattr(backend, "platform", repr(backend)),
        os.environ.get("XLA_FLAGS", ""),
        repr([(n, jax.config.values.get(n)) for n in _COMPILE_CONFIG]),
    ]
    for name in ("in_shardings", "out_shardings", "in_layouts", "out_layouts", "num_devices"):
        parts.append(f"{name}={args.get(name)!r}")
    for sharding in (*(args.get("in_shardings") or ()), *(args.get("out_shardings") or ())):
        devices = getattr(sharding, "_device_assignment", None)  # a mesh's repr omits them
        if devices:
            parts.append(repr([getattr(d, "id", d) for d in devices]))
            break
    parts.append(repr(args.get("context_mesh")))
    parts.append(repr(sorted(args.get("kept_var_idx") or ())))
    for const in getattr(lowering, "const_args", None) or ():
        data = np.ascontiguousarray(np.asarray(const))
        parts.append(f"{data.dtype}{data.shape}:{hashlib.sha256(data.tobytes()).hexdigest()}")
    return "\n".join(parts), not args.get("host_callbacks")


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


def autoreload_dedupes() -> bool:
    """Whether IPython's ``%autoreload`` is on with its *deduperreload* (IPython >= 9, the
    default of ``%autoreload 2``; ``--full`` or ``2-`` turns it off), which compiles a reloaded
    function from its unparsed text: the code object's line numbers count from 1, not from the
    file (ipython/ipython#15359, open; checked with IPython 9.18.1:
    ``AutoreloadMagics._reloader.enabled`` / ``.deduper_reloader.enabled``)."""
    ipython_module = sys.modules.get("IPython")
    shell = ipython_module.get_ipython() if ipython_module is not None else None
    if shell is None:
        return False
    magics = shell.magics_manager.registry.get("AutoreloadMagics")
    reloader = getattr(magics, "_reloader", None)
    deduper = getattr(reloader, "deduper_reloader", None)
    return bool(getattr(reloader, "enabled", False) and getattr(deduper, "enabled", False))


def traceback_codes(traceback: Any) -> list[Any]:
    """The code objects of a ``jaxlib`` Traceback (``raw_frames()``: JAX 0.10.2 and 0.12.0.1),
    innermost first; [] where it is missing or its API moved."""
    try:
        return list(traceback.raw_frames()[0]) if traceback is not None else []
    except (AttributeError, TypeError, IndexError):
        return []


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


_QUIET = {"told": False}  # quiet_platforms set jax_platforms in this process


def quiet_platforms() -> bool:
    """Tell JAX to start on the CPU where an accelerator plugin is installed without its
    device (see :func:`quiet_backend_start`); starts nothing, so the user may still configure
    JAX (``jax_num_cpu_devices``...) before its first use. True when JAX was told so: libtpu
    then stays silent (it only speaks when its backend starts). Nothing is done when the
    backends already started, when JAX_PLATFORMS or ``jax_platforms`` is set, or when device
    files exist (a real TPU/GPU: JAX picks it). Checked with JAX 0.10.2."""
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized():
        return False
    if _QUIET["told"]:  # told already (at import): the start still has to be quiet
        return True
    if os.environ.get("JAX_PLATFORMS") or jax.config.jax_platforms:
        return False
    if _accelerator_files() or glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/dev/kfd"):
        return False
    if not _plugins_without_their_device():
        return False  # plain CPU JAX: nothing to quiet
    jax.config.update("jax_platforms", "cpu")
    _QUIET["told"] = True
    return True


_TPU_PROFILER_SKIPPED = threading.Event()


@contextlib.contextmanager
def tpu_plugin_without_profiler() -> Iterator[None]:
    """Let a deviceless TPU compile load libtpu without registering libtpu's profiler.

    JAX registers a PJRT plugin's profiler when it loads the plugin (JAX 0.10.2:
    ``xla_bridge.make_pjrt_tpu_topology`` calls ``_profiler.register_plugin_profiler``). With
    no TPU attached, that profiler crashes the process at the next ``jax.profiler`` trace
    (segmentation fault, measured with libtpu 0.0.52), so ``--profile`` had to be refused for
    the rest of the kernel. A deviceless compile needs libtpu's compiler, never its profiler:
    in this block the registration is skipped, only where libtpu is not loaded yet and no TPU
    is attached (on a TPU VM JAX's backend loads libtpu, with its profiler, at start-up)."""
    from jax._src import xla_bridge
    from jax._src.lib import xla_client

    profiler = getattr(xla_bridge, "_profiler", None)
    original = getattr(profiler, "register_plugin_profiler", None)
    if original is None or _accelerator_files() or xla_client.pjrt_plugin_loaded("tpu"):
        yield
        return

    def skip(_c_api: Any) -> None:
        _TPU_PROFILER_SKIPPED.set()

    profiler.register_plugin_profiler = skip
    try:
        yield
    finally:
        profiler.register_plugin_profiler = original


def tpu_profiler_skipped() -> bool:
    """Whether libtpu was loaded here by :func:`tpu_plugin_without_profiler` (its profiler
    never registered, so JAX's profiler still works in this process)."""
    return _TPU_PROFILER_SKIPPED.is_set()


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
    if not quiet_platforms():
        return
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

    ``then`` (optional) is more analysis that needs no compile (the traced program's): called
    with the converted text in the same thread right after the conversion, if XLA is still
    compiling; :meth:`beside` gives what it returned (None: not run, or it raised -- the
    analysis then does that work itself, and meets the error there).
    """

    POLL = 0.005  # seconds between looks at the compiling thread
    STILL = 0.02  # how long its frame must not move: it is in C++, not in Python

    def __init__(self, lowered: Any, then: Callable[[str], Any] | None = None) -> None:
        from jax._src.interpreters import mlir

        self._then = then
        self._beside: Any = None

        self._bytecode = mlir.module_to_bytecode(lowered.compiler_ir("stablehlo"))
        self._tuple_args = bool(lowered._lowering.compile_args.get("tuple_args", False))
        self._caller = threading.get_ident()
        self._over = threading.Event()
        self._result: tuple[str | None, BaseException | None] | None = None
        self.cpu_seconds = 0.0
        self.trim_seconds = 0.0
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

        # not niced: the conversion holds the GIL, and a thread at the lowest priority holding
        # it on a busy machine keeps the compiling thread from coming back from XLA (priority
        # inversion). Measured, 10^4 calls of a small function beside two CPU burners: compile
        # stage 91.7 s niced against 13.1 s not (plain jax.jit: 15.7 s all told); on the quiet
        # machine the same within noise (7.4-8.3 s against 8.1-8.5 s)
        t0 = time.thread_time()
        try:
            computation = _jax.mlir.mlir_module_to_xla_computation(
                self._bytecode, use_tuple_args=self._tuple_args
            )
            self._result = (computation.as_hlo_module().to_string(), None)
        except BaseException as exc:  # handed to the analysis, raised there
            self._result = (None, exc)
        finally:
            self._bytecode = b""
            computation = None
        # the conversion's C++ structures (MLIR, the HLO module: several times the text) are
        # freed now, but into this thread's own heap arena, which XLA's compile threads do not
        # reuse: handed back, they do not add to the compile's peak (10^4 calls: 870 -> 749 MB
        # peak resident, plain jax.jit 682 MB)
        self.trim_seconds = release_free_memory()
        text = self._result[0]
        if self._then is not None and text is not None and not self._over.is_set():
            with contextlib.suppress(Exception):  # the analysis redoes it, and raises there
                self._beside = self._then(text)
        self._then = None
        self.cpu_seconds = time.thread_time() - t0

    def compile_done(self) -> None:
        """The compile returned: a thread still waiting for it gives up."""
        self._over.set()

    def beside(self) -> Any:
        """What ``then`` returned (waits for it if it is running), once; None where it did not
        run."""
        self._over.set()
        self._thread.join()
        result, self._beside = self._beside, None
        return result

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


_TRIM: list[Any] = []  # glibc's malloc_trim, once looked up (None: not glibc)


def release_free_memory() -> float:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim(0)``); returns
    the seconds it took. Memory freed by one thread stays in that thread's arena, counted as
    the process's, until trimmed. A no-op where the C library is not glibc (macOS, musl)."""
    if not _TRIM:
        import ctypes
        import ctypes.util

        fn = None
        with contextlib.suppress(OSError, AttributeError, TypeError):
            fn = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
            fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
        _TRIM.append(fn)
    fn = _TRIM[0]
    if fn is None:
        return 0.0
    t0 = time.perf_counter()
    fn(0)
    return time.perf_counter() - t0


def passed_as_argument(value: Any) -> bool:
    """Whether JAX passes this closed-over array to the program as an argument instead of
    embedding it as a constant: JAX >= 0.12.1 does by default (``jax_use_simplified_jaxpr_
    constants``) for arrays above ``jax_embedded_constants_max_bytes`` (1,024 bytes), and XLA
    can then fold no work on it. The rule is JAX 0.12.1's ``jax._src.core.is_hoistable``."""
    import numpy as np

    if not getattr(jax.config, "jax_use_simplified_jaxpr_constants", False):
        return False
    limit = getattr(jax.config, "jax_embedded_constants_max_bytes", None)
    return limit is not None and np.ndim(value) > 0 and getattr(value, "nbytes", 4) > int(limit)


def name_scope(label: str) -> Any:
    """One scope element of JAX's name stack (``source_info_util.Scope``; JAX 0.10.2)."""
    global _Scope
    if _Scope is None:
        from jax._src import source_info_util

        _Scope = source_info_util.Scope
    return _Scope(label)


_Scope: Any = None


def distributed_client() -> Any | None:
    """The client of ``jax.distributed`` (its key-value store: ``key_value_set``,
    ``blocking_key_value_get(key, timeout_in_ms)``, ``key_value_try_get``, and the ``_bytes``
    forms ``processes`` uses, on JAX 0.10.2 and 0.12.0.1), None where
    ``jax.distributed.initialize`` was not called. JAX 0.10.2: ``jax._src.distributed.
    global_state.client`` (a ``jaxlib._jax.DistributedRuntimeClient``)."""
    try:
        from jax._src import distributed
    except ImportError:  # moved in this JAX: no multi-process check (documented in processes.md)
        return None
    return getattr(getattr(distributed, "global_state", None), "client", None)


def partition_devices(compiled: Any) -> list[Any] | None:
    """The devices a compiled SPMD program runs on, partition ``i`` on the ``i``-th (its
    shardings' ``_device_assignment``; JAX 0.10.2), None where not known (not compiled, no
    sharding). A program over a mesh has them in the mesh's row-major order."""
    if compiled is None:
        return None
    for attr in ("input_shardings", "output_shardings"):
        try:
            leaves = jax.tree_util.tree_leaves(getattr(compiled, attr))
        except (AttributeError, TypeError, ValueError):
            continue
        for sharding in leaves:
            devices = getattr(sharding, "_device_assignment", None)
            if devices:
                return list(devices)
    return None


# --- XLA:CPU's dump and library fusions (nbcompile/measure/metal.py, measure/_library.py) ------
# XLA debug options and file layouts are XLA internals: each is checked here, on jaxlib 0.10.2
# and 0.12.0.1, by tests/measure/test_metal_reaches.py, which names the reach that broke.


def xla_dump_options(platform: str) -> dict[str, Any]:
    """XLA debug options (beside ``xla_dump_to``) of a compile that records its pass pipeline.

    ``xla_dump_hlo_pass_re=.*`` writes the module after every pass that changed it. The other
    options pin what a user's ``XLA_FLAGS`` may have turned off (compile options override
    ``XLA_FLAGS``): ``--xla_dump_hlo_as_text=false`` with another format on
    (``--xla_dump_hlo_as_proto=true``; alone, XLA falls back to text) left no text to read and
    ``c.passes`` silently None; other formats only slow the dump down; a module or pipeline
    filter would leave out the program's passes.
    On CPU ``xla_dump_emitter_re=llvm`` has XLA:CPU write its kernels' optimised LLVM IR
    (``*.ir-with-opt.ll``): jaxlib 0.12.0.1 writes it only for emitters that regex matches
    (``llvm``: the LLVM IR, not the MLIR dumps ``.*`` adds, 350 KB per kernel), 0.10.2 always
    wrote it and accepts the option. libtpu's XLA is another build: TPU gets the options every
    XLA has had for years only."""
    options: dict[str, Any] = {
        "xla_dump_hlo_pass_re": ".*",
        "xla_dump_hlo_as_text": True,
        "xla_dump_hlo_as_proto": False,
        "xla_dump_hlo_as_dot": False,
        "xla_dump_hlo_as_html": False,
        "xla_dump_hlo_module_re": ".*",
        "xla_dump_max_hlo_modules": -1,
    }
    if platform == "cpu":
        options.update(xla_dump_emitter_re="llvm", xla_dump_hlo_pipeline_re=".*")
    return options


#: XLA:CPU's library fusions by their ``fusion_config`` kind (``backend_config={"fusion_config":
#: {"kind":"__ynn_fusion"}}`` on a ``kind=kCustom`` fusion): the library that runs them. jaxlib
#: 0.10.2 and 0.12.0.1 name these two in their binaries; ``__xnn_fusion`` is older XLA's.
LIBRARY_FUSION_KINDS = {
    "__ynn_fusion": "YNNPACK",
    "__xnn_fusion": "XNNPACK",
    "__onednn_fusion": "oneDNN",
}

#: XLA:CPU debug options that keep every op in XLA's own code generator: an empty
#: ``xla_cpu_experimental_ynn_fusion_type`` turns every YNNPACK fusion off (default: dots,
#: plus reductions with the element-wise ops that feed them, on jaxlib 0.10.2 and 0.12.0.1);
#: the XNNPACK and oneDNN equivalents are off by default and stay off. All four are accepted as
#: compile options by both versions (a name XLA does not know is refused, not ignored).
LIBRARY_FUSIONS_OFF: dict[str, Any] = {
    "xla_cpu_experimental_ynn_fusion_type": "",
    "xla_cpu_experimental_xnn_fusion_type": "",
    "xla_cpu_use_onednn": False,
    "xla_cpu_experimental_onednn_fusion_type": "",
}


def jaxlib_native_library() -> str | None:
    """The shared library that holds XLA and its CPU libraries (YNNPACK, oneDNN) in the jaxlib
    installed: ``jaxlib/libjax_common.so`` (jaxlib 0.10.2 and 0.12.0.1, Linux; it keeps its
    ELF symbol table, so YNNPACK's kernel functions are found by name); None where absent."""
    import jaxlib

    folder = os.path.dirname(jaxlib.__file__)
    for name in ("libjax_common.so", "libjax_common.dylib"):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return path
    return None
