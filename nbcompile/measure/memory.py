"""``memory_map(c)``: where the bytes of a compiled program go, and whether it fits its target.

The map is read from the program XLA already compiled (its scheduled optimised HLO and
``memory_analysis()``): no second compile on the usual path. Two cases compile again, with
``xla_dump_to`` into a temporary folder, and read XLA's own dump files:

* the program was not compiled because XLA:TPU refused it for lack of HBM
  (``CompileTimeHbmOom``): XLA writes the scheduled module and its memory report before it gives
  up, so the map of a program that does not fit is still drawn (``memory_map_of_lowered``);
* a cross-check (``xla_memory_files``): XLA's live-range dump, memory-usage report and buffer
  assignment, which the tests compare with the map. On XLA:CPU every dump also writes LLVM IR and
  an object file per kernel (``xla_dump_emitter_re`` / ``xla_dump_hlo_pass_re`` do not stop it:
  measured), which is why the usual path reads the compiled program instead.

With ``--grad`` (``c.grad`` set) the map describes the ``value_and_grad`` program: that is the
one that keeps the forward pass's residuals for the backward pass.
"""

from __future__ import annotations

import contextlib
import glob
import os
import tempfile
from dataclasses import dataclass
from typing import Any

from .._compat import persistent_cache_disabled
from ..analysis.cost import normalise_memory
from ..analysis.hlo import parse_hlo
from ..analysis.memory import MemoryMap, memory_map_from_hlo
from ..analysis.memory_xla import (
    XlaAllocation,
    XlaLiveRange,
    hbm_oom_figures,
    parse_buffer_assignment,
    parse_live_range,
    parse_memory_usage_report,
)
from ..errors import CompileError, TargetError
from ..targets._capacity import device_capacity
from ._functions import attach_functions

__all__ = [
    "XlaMemoryFiles",
    "compile_for_memory",
    "memory_map",
    "memory_map_of_lowered",
    "xla_memory_files",
]


#: How XLA writes the dumped module: every ``get-tuple-element`` as its own instruction, as in
#: the live-range dump's schedule. XLA shipped with jaxlib 0.12 prints them folded into their
#: users (``%fusion#1``) by default, so the schedule's steps could not be read from the text.
#: Checked: jaxlib 0.12.0.1 (CPU) and libtpu 0.0.52 accept it; jaxlib 0.10.2's XLA:CPU does
#: not know it (and does not fold), so it is left out there.
DUMP_TEXT = {"xla_dump_compact_gte": False}


@dataclass
class XlaMemoryFiles:
    """XLA's own memory dumps of one compile (see :mod:`nbcompile.analysis.memory_xla`)."""

    hlo_text: str
    live_range: XlaLiveRange | None
    memory_usage: dict[int, int]
    allocations: list[XlaAllocation]
    error: str | None = None  # XLA's message when it refused the program (e.g. HBM OOM)


def _devices(target: Any, compiled: Any = None) -> int:
    """How many devices the program runs on (its figures are per device): the target's mesh,
    else the devices the compiled program's inputs are placed on (``jax.ShapeDtypeStruct``
    arguments carrying a ``NamedSharding``, arrays the user sharded)."""
    mesh = getattr(target, "mesh", None)
    size = getattr(mesh, "size", None)
    if size:
        return int(size)
    try:
        import jax

        shardings = jax.tree_util.tree_leaves(compiled.input_shardings) if compiled else []
        return max([len(s.device_set) for s in shardings], default=1)
    except Exception:  # JAX: best effort, a backend may not say
        return 1


def _program(c: Any) -> tuple[Any, str]:
    grad = getattr(c, "grad", None)
    return (grad, "value_and_grad") if grad is not None else (c, "forward")


def _dump(lowered: Any, folder: str) -> tuple[Any | None, str | None]:
    """Compile ``lowered`` dumping into ``folder``; (compiled, None) or (None, XLA's message)
    when XLA refused the program for lack of device memory."""
    import jax

    try:
        try:
            return lowered.compile(compiler_options={"xla_dump_to": folder, **DUMP_TEXT}), None
        except jax.errors.JaxRuntimeError as err:
            if "No such compile option" not in str(err):
                raise
            # an XLA that predates the option (jaxlib 0.10.2's XLA:CPU) never folds them
            return lowered.compile(compiler_options={"xla_dump_to": folder}), None
    except jax.errors.JaxRuntimeError as err:
        message = str(err)
        if "RESOURCE_EXHAUSTED" not in message:
            raise CompileError(
                f"XLA could not compile the program: {message.splitlines()[0]}",
                hint="see the chained XLA error",
            ) from err
        return None, message


def _read(path: str) -> str | None:
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def xla_memory_files(lowered: Any) -> XlaMemoryFiles:
    """Compile ``lowered`` once more with ``xla_dump_to`` and read XLA's memory dumps."""
    return _compile_with_dumps(lowered)[0]


def _compile_with_dumps(lowered: Any) -> tuple[XlaMemoryFiles, Any | None]:
    # an executable served from JAX's persistent cache is not compiled: XLA dumps no memory files
    with (
        tempfile.TemporaryDirectory(prefix="nbcompile-memory-") as folder,
        persistent_cache_disabled(),
    ):
        compiled, error = _dump(lowered, folder)
        # the program's own module is the largest (XLA:CPU also dumps small helper modules)
        found = sorted(
            glob.glob(os.path.join(folder, "*after_optimizations.txt")),
            key=os.path.getsize,
            reverse=True,
        )
        if not found:
            raise CompileError(
                "XLA wrote no optimised module to read the memory map from",
                hint=(error or "").splitlines()[0] if error else None,
            )
        stem = found[0][: -len(".txt")]
        hlo = _read(found[0]) or ""
        live = _read(stem + "-live-range.txt")
        usage = _read(stem + "-memory-usage-report.txt")
        allocations = _read(stem + "-buffer-assignment.txt")
    return XlaMemoryFiles(
        hlo_text=hlo,
        live_range=parse_live_range(live) if live else None,
        memory_usage=parse_memory_usage_report(usage) if usage else {},
        allocations=parse_buffer_assignment(allocations) if allocations else [],
        error=error,
    ), compiled


def compile_for_memory(
    lowered: Any,
    *,
    target: Any = None,
    program: str = "forward",
    capacity: tuple[int | None, str | None, str | None] | None = None,
) -> tuple[MemoryMap, Any | None]:
    """Compile ``lowered`` and map its memory: ``(map, compiled)``, ``compiled`` None when XLA
    refused the program for lack of device memory (the map then comes from XLA's dumps). On
    TPU the dump costs nothing extra and is always taken (one compile either way)."""
    import jax

    platform = getattr(target, "platform", None) or "cpu"
    cap = capacity or device_capacity(target, platform)
    if platform != "tpu":
        present = target is None or getattr(target, "present", True)
        try:
            # a deviceless executable stored in JAX's cache cannot be read back without a device
            with contextlib.nullcontext() if present else persistent_cache_disabled():
                compiled = lowered.compile()
        except jax.errors.JaxRuntimeError as err:
            if "RESOURCE_EXHAUSTED" not in str(err):
                raise
        else:
            m = memory_map_from_hlo(
                compiled.as_text(),
                platform=platform,
                xla_memory=normalise_memory(compiled.memory_analysis()) or {},
                capacity=cap,
                devices=_devices(target, compiled),
                program=program,
            )
            return m, compiled
    files, compiled = _compile_with_dumps(lowered)
    return _from_files(files, target, platform, cap, program, compiled), compiled


def _from_files(
    files: XlaMemoryFiles,
    target: Any,
    platform: str,
    cap: tuple[int | None, str | None, str | None],
    program: str,
    compiled: Any | None,
) -> MemoryMap:
    raw = compiled.memory_analysis() if compiled is not None else None
    m = memory_map_from_hlo(
        files.hlo_text,
        platform=platform,
        xla_memory=normalise_memory(raw) or {},
        capacity=cap,
        devices=_devices(target, compiled),
        program=program,
    )
    if m.allocated_bytes is None:
        m.allocated_bytes = files.memory_usage.get(0)
    if files.error is not None:
        figures = hbm_oom_figures(files.error)
        m.xla["refused"] = True
        if figures is not None:
            m.xla["oom_required_bytes"], m.xla["oom_available_bytes"] = figures
        m.notes.append(
            "XLA refused to compile this program for the target: "
            + files.error.split("\n")[0].split(": ", 1)[-1]
        )
    return m


def memory_map_of_lowered(
    lowered: Any,
    *,
    target: Any = None,
    source: Any = None,
    program: str = "forward",
    capacity: tuple[int | None, str | None, str | None] | None = None,
) -> MemoryMap:
    """The map of a lowered program, compiled here with XLA's dumps (see the module docstring):
    works for a TPU program XLA refuses for lack of HBM (then ``fits`` is False)."""
    files, compiled = _compile_with_dumps(lowered)
    platform = getattr(target, "platform", None) or "cpu"
    cap = capacity or device_capacity(target, platform)
    m = _from_files(files, target, platform, cap, program, compiled)
    if source is not None:  # locations in the compiling cell's numbering
        m.at_peak = memory_map_from_hlo(
            files.hlo_text, source=source, platform=platform, program=program
        ).at_peak
    return m


def memory_map(
    c: Any, *, capacity: tuple[int | None, str | None, str | None] | None = None
) -> MemoryMap:
    """The :class:`~nbcompile.analysis.memory.MemoryMap` of compilation ``c`` (its
    ``value_and_grad`` program with ``--grad``), per device, with the target's capacity.

    ``capacity`` overrides ``(bytes, source, label)`` (e.g. to plan for a smaller budget).
    Raises ``TargetError`` (NBC600) where nothing was compiled (StableHLO only).
    """
    prog, kind = _program(c)
    target = getattr(c, "target", None)
    platform = getattr(target, "platform", None) or getattr(c, "backend", "cpu")
    if getattr(target, "lower_only", False):
        raise TargetError(
            f"no memory map for {getattr(target, 'label', platform)}: the program was only "
            "lowered (no compiler for it here)",
            hint=getattr(target, "note", None) or "install the compiler for the platform",
        )
    cap = capacity or device_capacity(target, platform)
    hlo = prog.hlo
    if hlo is None:
        return memory_map_of_lowered(
            prog.lowered, target=target, source=prog.source, program=kind, capacity=cap
        )
    raw = None
    if prog.compiled is not None:
        try:
            raw = prog.compiled.memory_analysis()
        except (RuntimeError, NotImplementedError):  # JAX: best effort, backends may refuse
            raw = None
    m = memory_map_from_hlo(
        hlo,
        module=parse_hlo(hlo),
        source=prog.source,
        platform=platform,
        xla_memory=normalise_memory(raw) or {},
        capacity=cap,
        devices=_devices(target, prog.compiled),
        program=kind,
    )
    if raw is None:
        m.notes.append(
            "XLA gave no memory_analysis() for this backend: the fit is judged on "
            "the peak of live buffers (an estimate of what it allocates)"
        )
    return attach_functions(m, prog)
