"""Down to the metal: XLA's dump of a program's compile, and its kernels' code.

With ``--passes`` the program's own compile writes the dump (``run_stages(dump=True)``:
``xla_dump_to`` a temporary folder with :func:`~nbcompile._compat.xla_dump_options`, without
JAX's persistent compilation cache, whose hit runs no XLA and dumps nothing) and
:func:`read_stages_dump` reads it; otherwise :func:`dump_compile` compiles the lowered program
once more the same way. Either keeps what the dump holds (:func:`read_dump`): the pass log
(:func:`~nbcompile.analysis.passes_log.read_pass_log`), each kernel's optimised LLVM IR
(``*.ir-with-opt.ll``) and XLA:CPU's object files (``obj-file.*.o``), with when the compile
started, when its last HLO pass was dumped and when it ended. A dump XLA could not write whole
(a full disk: XLA logs the failure and compiles on) is refused with NBC610 (measure/_dump_check.py).

:func:`kernel_code` reads one kernel out of that: its symbol is found in the objects' ELF symbol
tables (read with ``struct``: measure/_dump_check.py) and its machine code disassembled by
Capstone — never by our own decoder.
XLA emits no LLVM debug locations for its kernels (no ``!dbg`` in the IR, checked with JAX
0.10.2 and 0.12.0.1), so each instruction is mapped to the source locations of the kernel's HLO
ops (kernel granularity: every instruction of a kernel carries the same locations);
``KernelCode.mapping`` says so. A fusion XLA:CPU hands to a library (``ynn_fusion``: YNNPACK)
has no code of XLA's own: for element-wise ops and reductions the code shown is XLA's own for the
same ops from one more compile with the library fusions off, labelled as not what runs; dots and
convolutions name the library and its kernels (measure/_library.py). On a CUDA GPU the kernel's
PTX is read instead (measure/_ptx.py). Checked with JAX 0.10.2 and 0.12.0.1 on XLA:CPU (x86-64).
"""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._compat import LIBRARY_FUSIONS_OFF, persistent_cache_disabled, xla_dump_options
from ..analysis.passes_log import PassLog, read_pass_log
from ..errors import TargetError
from ._dump_check import check_dump, dump_cut_short, dump_unwritable, no_passes_reason
from ._kernel_code import (
    KernelCode,
    ir_of,
    no_code,
    parsed_module,
    shared_kernel,
    short,
    symbols,
)
from ._ptx import PTX_MAPPING, PTX_SOURCE, ptx_kernel_code, ptx_vector_width

__all__ = [
    "PTX_MAPPING",
    "PTX_SOURCE",
    "KernelCode",
    "MetalDump",
    "dump_compile",
    "kernel_code",
    "library_call",
    "read_dump",
    "read_stages_dump",
    "vector_width",
]

#: what ``KernelCode.mapping`` says when the kernel's IR carries no debug locations
KERNEL_MAPPING = (
    "kernel: XLA emits no debug locations in its kernels' LLVM IR (no !dbg), so every "
    "instruction carries the source locations of all the kernel's HLO ops"
)
OBJECT_SOURCE = "XLA's object file of the dumped compile (obj-file.*.o), disassembled by Capstone"
_VECTOR_REGISTER = re.compile(r"\b([xyz])mm\d+\b")
_WIDTH = {"x": 128, "y": 256, "z": 512}


@dataclass
class MetalDump:
    """What one dumped compile of a program left: the pass log, the kernels' LLVM IR and object
    files by file name, and its clock (seconds since the epoch)."""

    platform: str
    passes: PassLog | None
    llvm_ir: dict[str, str] = field(default_factory=dict)
    objects: dict[str, bytes] = field(default_factory=dict)
    #: XLA:GPU's PTX by file name (``*.ptx``, empty ones left out)
    ptx: dict[str, str] = field(default_factory=dict)
    started: float = 0.0
    finished: float = 0.0
    #: True when the program's own compile wrote this dump (``--passes``); False for one more
    #: compile of it (:func:`dump_compile`)
    own: bool = False
    #: why ``passes`` is None (XLA wrote no pass files), else None
    no_passes: str | None = None
    #: the optimised module of this dump's compile, where it was not the program's own
    hlo: str | None = field(default=None, repr=False)
    #: the dump of one more compile with XLA:CPU's library fusions off (code shown for a
    #: ``ynn_fusion``, :func:`kernel_code`), made on request
    libraries_off: MetalDump | None = field(default=None, repr=False, compare=False)
    #: (profile id, the report's ``extras["passes"]``) once built (compilation/_display.py)
    view: Any = field(default=None, repr=False, compare=False)
    #: {symbol: (e_machine, object, code offset, address, size)} of the objects' functions,
    #: read once (:func:`kernel_code`)
    functions: dict[str, tuple[str, bytes, int, int, int]] | None = field(
        default=None, repr=False, compare=False
    )
    #: (kernel names, those with a function in the objects), worked out once (:func:`kernel_code`)
    with_code: tuple[list[str], list[str]] | None = field(default=None, repr=False, compare=False)
    #: (optimised module text, its fusions' signatures by name), read once (:func:`kernel_code`)
    signatures: tuple[str, dict[str, Any]] | None = field(default=None, repr=False, compare=False)
    #: (optimised module text, its parsed module), read once (library fusions)
    module: tuple[str, Any] | None = field(default=None, repr=False, compare=False)
    #: {symbol: (PTX function, target, file name)} of the PTX's kernels, read once (GPU)
    entries: dict[str, tuple[str, str, str]] | None = field(default=None, repr=False, compare=False)

    @property
    def seconds(self) -> float:
        """Wall time of the dumped compile (writing the dump included)."""
        return self.finished - self.started

    @property
    def passes_share(self) -> float | None:
        """The share of the dumped compile spent until its last HLO pass was dumped (the rest is
        code generation); None without a pass log."""
        last = self.passes.last_dump_time if self.passes is not None else None
        if last is None or self.seconds <= 0:
            return None
        return min(max((last - self.started) / self.seconds, 0.0), 1.0)


def dump_compile(
    lowered: Any,
    platform: str,
    compiler_options: dict[str, Any] | None = None,
    *,
    passes: bool = True,
) -> MetalDump:
    """Compile ``lowered`` once more with XLA's dump on (persistent cache off) and read the dump;
    ``passes=False`` dumps the kernels only (no module after every pass). NBC610 where the dump
    cannot be written whole (a full disk)."""
    options = dict(compiler_options or {})
    try:
        folder = tempfile.TemporaryDirectory(prefix="nbcompile-dump-")
    except OSError as err:
        raise dump_unwritable(err) from None
    with folder:
        dump = xla_dump_options(platform)
        if not passes:
            dump.pop("xla_dump_hlo_pass_re", None)
        options.update(xla_dump_to=folder.name, **dump)
        # a persistent-cache hit would run no XLA and dump nothing
        with persistent_cache_disabled():
            started = time.time()
            compiled = lowered.compile(compiler_options=options)
            finished = time.time()
        out = read_dump(folder.name, platform, started, finished, passes=passes)
        out.hlo = compiled.as_text()
        return out


def read_dump(
    folder: str | Path,
    platform: str,
    started: float,
    finished: float,
    *,
    own: bool = False,
    passes: bool = True,
    early: Any = None,
) -> MetalDump:
    """The :class:`MetalDump` of the compile that dumped to ``folder`` (its other modules'
    files are deleted first: :func:`_keep_program_module`); ``started`` / ``finished`` are that
    compile's clock, ``own`` whether it was the program's own compile, ``passes`` whether a
    pass log was asked for, ``early`` a :class:`~nbcompile.analysis.passes_log.PassLogWatcher`
    that read part of it while XLA compiled. NBC610 when XLA did not write the dump whole (a
    full disk)."""
    root = Path(folder)
    _keep_program_module(root)
    objects = {p.name: p.read_bytes() for p in sorted(root.glob("*obj-file.*.o"))}
    damaged = check_dump(root, objects)
    if damaged:
        raise dump_cut_short(root, damaged)
    log = read_pass_log(str(root), early) if passes else None
    ptx = {p.name: p.read_text() for p in sorted(root.glob("*.ptx"))}
    return MetalDump(
        platform=platform,
        passes=log,
        llvm_ir={p.name: p.read_text() for p in sorted(root.glob("*.ir-with-opt.ll"))},
        objects=objects,
        ptx={name: text for name, text in ptx.items() if text.strip()},
        started=started,
        finished=finished,
        own=own,
        no_passes=no_passes_reason(root) if passes and log is None else None,
    )


def read_stages_dump(stages: Any) -> MetalDump | None:
    """The :class:`MetalDump` of a compile stage that wrote XLA's dump (``--passes``:
    ``stages.dump``), its folder removed once read; None when it wrote none or compiled
    nothing (XLA refused the program: its partial dump is dropped)."""
    dump = stages.dump
    if dump is None:
        return None
    stages.dump = None
    try:
        if stages.compiled is None:
            return None
        return read_dump(
            dump.path,
            stages.target.platform,
            dump.started,
            dump.finished,
            own=True,
            early=dump.early,
        )
    finally:
        dump.remove()


_BEFORE = re.compile(r"^module_(\d+)\.(.+)\.before_optimizations\.txt$")


def _keep_program_module(root: Path) -> None:
    """Delete the files of modules other than the program's from dump folder ``root``: XLA:GPU
    dumps the passes of modules it compiles on the side (``module_0668.fused_add...``, numbered
    after the program's), which the pass log would otherwise take for the program. The program's
    module is the last one with a ``before_optimizations`` file (its name may hold a dot: libtpu
    names it ``jit_step.cl_1014260217``)."""
    found = [
        (int(m.group(1)), m.group(2), m) for p in root.iterdir() if (m := _BEFORE.match(p.name))
    ]
    if not found:
        return
    *_, last = max(found, key=lambda f: f[:2])
    prefix = last.group(0).removesuffix("before_optimizations.txt")
    for path in root.iterdir():  # files only: libtpu writes a folder of its own per module
        if path.is_file() and path.name.startswith("module_") and not path.name.startswith(prefix):
            path.unlink()


def _functions(objects: dict[str, bytes]) -> Iterator[tuple[str, tuple[str, bytes, int, int, int]]]:
    """(symbol name, (``e_machine``, object, offset of its code in the object, address, size))
    of every function defined in ``objects`` (:func:`~nbcompile.measure._dump_check.elf_functions`);
    an object that is not whole ELF defines none (the dump check refused a damaged dump)."""
    from ._dump_check import elf_functions

    for blob in objects.values():
        try:
            machine, functions = elf_functions(blob)
        except ValueError:
            continue
        for name, section_at, value, size in functions:
            yield name, (machine, blob, section_at + value, value, size)


def _function_index(dump: MetalDump) -> dict[str, tuple[str, bytes, int, int, int]]:
    """{symbol name: (``e_machine``, object, offset of its code, address, size)} of every
    function in ``dump``'s objects (the first definition of a name), read once per dump: every
    kernel's look-up then costs nothing."""
    if dump.functions is None:
        index: dict[str, tuple[str, bytes, int, int, int]] = {}
        for name, found in _functions(dump.objects):
            index.setdefault(name, found)
        dump.functions = index
    return dump.functions


def _with_code(dump: MetalDump, kernels: Sequence[str]) -> list[str]:
    """Those of ``kernels`` an object of ``dump`` defines a function for, worked out once per
    dump and kernel list (the report asks for the code of several kernels in a row)."""
    kernels = list(kernels)
    if dump.with_code is None or dump.with_code[0] != kernels:
        index = _function_index(dump)
        found = [k for k in kernels if any(s in index for s in symbols(k))]
        dump.with_code = (kernels, found)
    return dump.with_code[1]


def _find_function(
    index: dict[str, tuple[str, bytes, int, int, int]], names: Sequence[str]
) -> tuple[str, str, bytes, int]:
    """(``e_machine``, symbol, code bytes, address) of the first of ``names`` defined in
    ``index``."""
    for name in names:
        if name in index:
            machine, blob, at, address, size = index[name]
            return machine, name, blob[at : at + size], address
    raise KeyError(names[0])


def _disassembler(machine: str) -> tuple[Any, str]:
    import capstone

    if machine == "EM_X86_64":
        return capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64), "x86-64"
    if machine == "EM_AARCH64":
        return capstone.Cs(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM), "aarch64"
    raise TargetError(f"kernel code for {machine} machine code is not supported", code="NBC600")


def vector_width(asm: Sequence[str], isa: str) -> int | None:
    """Bits of the widest SIMD register in ``asm`` (x86: xmm 128, ymm 256, zmm 512; AArch64
    NEON ``v`` registers 128); PTX (``isa`` ``ptx ...``), which has no SIMD registers: bits of
    its widest vector load or store per thread (``.v4.b32``: 128). None when none is used or the
    ISA is another."""
    if isa.startswith("ptx"):
        return ptx_vector_width(asm)
    if isa == "x86-64":
        widths = {_WIDTH[m.group(1)] for line in asm for m in _VECTOR_REGISTER.finditer(line)}
        return max(widths) if widths else None
    if isa == "aarch64":
        return 128 if any(re.search(r"\bv\d+\.", line) for line in asm) else None
    return None


def kernel_code(
    dump: MetalDump,
    name: str,
    locations: Sequence[Any],
    kernels: Sequence[str] = (),
    hlo: str | None = None,
    *,
    libraries_off: Callable[[], MetalDump | None] | None = None,
) -> KernelCode:
    """:class:`KernelCode` of kernel ``name`` (as in ``c.fusions``) from ``dump``; ``locations``
    are the kernel's source locations, ``kernels`` the program's kernel names and ``hlo`` its
    optimised module (to find the code of a fusion XLA compiled once for several, and library
    fusions). ``libraries_off`` gives the dump of the program compiled with XLA:CPU's library
    fusions off (compiling it, or None where it was not made): a library fusion of element-wise
    ops or reductions then gets XLA's own code for the same ops, labelled as not what runs."""
    if not isinstance(name, str):
        raise TargetError(
            f"kernel_code takes a kernel's name (a str from c.fusions), not a "
            f"{type(name).__name__}",
            code="NBC600",
            hint="e.g. c.kernel_code(c.fusions[0].name)",
        )
    if dump.platform == "tpu":
        raise TargetError(
            "kernel code is not available on TPU: the TPU compiler is closed (libtpu) and "
            "writes no kernel IR or machine code nbcompile can read",
            code="NBC600",
            hint="c.passes and c.hlo show what XLA did before the TPU back end",
        )
    if dump.platform in ("cuda", "gpu"):
        return ptx_kernel_code(dump, name, locations, kernels, hlo)
    if dump.platform != "cpu":
        raise TargetError(
            f"kernel code is read on CPU and CUDA GPUs (PTX) only, not on {dump.platform}",
            code="NBC600",
            hint="compile with --backend cpu to see XLA:CPU's code for the same program",
        )
    with_code = _with_code(dump, kernels)
    shared = None if name in with_code else shared_kernel(dump, hlo, name, with_code)
    try:
        return _object_code(dump, name, shared, locations)
    except KeyError:
        pass
    from ._library import (
        library_call_error,
        library_fusion,
        on_request_error,
        stand_in_code,
        stand_in_kernels,
    )

    fusion = library_fusion(parsed_module(dump, hlo), name) if hlo else None
    if fusion is None:
        raise no_code("machine code", name, with_code, "library calls (dots, convolutions)")
    if fusion.heavy:
        raise library_call_error(fusion, with_code)
    off = libraries_off() if libraries_off is not None else None
    if off is None or not off.hlo:
        raise on_request_error(fusion)
    module_off = parsed_module(off, off.hlo)
    stand_in = stand_in_kernels(fusion, parsed_module(dump, hlo), module_off)
    off_kernels = list(_kernel_names(module_off))
    if not stand_in:
        raise TargetError(
            f"{short(name)} is a {fusion.library} library fusion ({fusion.summary()}), and the "
            f"compile with {fusion.library} off has no kernel holding its ops",
            code="NBC600",
            hint="c.passes shows where XLA formed it (dot-library-rewriter)",
        )
    return stand_in_code(
        fusion,
        stand_in,
        lambda k: kernel_code(off, k, locations, off_kernels, off.hlo),
        locations,
    )


def library_call(dump: MetalDump, name: str, hlo: str | None) -> dict[str, str] | None:
    """What the view says of kernel ``name`` when a library runs it (a ``ynn_fusion``, or a dot
    or convolution XLA:CPU's runtime runs with Eigen): ``{"library", "what", "code"}`` in the
    words of :func:`kernel_code`'s answer for it, without compiling anything; None for XLA's
    own kernels (and off CPU)."""
    if dump.platform != "cpu" or not hlo:
        return None
    from ._library import library_fusion, library_note

    fusion = library_fusion(parsed_module(dump, hlo), name)
    return None if fusion is None else library_note(fusion)


def _kernel_names(module: Any) -> Iterator[str]:
    """The names of ``module``'s fusions that are kernels (not fused into another)."""
    from ..analysis.compiled import _non_fused

    for comp in _non_fused(module):
        for instr in comp.instructions:
            if instr.opcode == "fusion":
                yield instr.name


def _object_code(
    dump: MetalDump, name: str, shared: str | None, locations: Sequence[Any]
) -> KernelCode:
    """:class:`KernelCode` of kernel ``name`` read from XLA:CPU's object files (the code of
    ``shared`` where XLA compiled the fusion once for both); KeyError where no object defines
    it."""
    machine, symbol, code, address = _find_function(_function_index(dump), symbols(shared or name))
    disassembler, isa = _disassembler(machine)
    asm = [
        f"{i.address:6x}:  {i.mnemonic} {i.op_str}".rstrip()
        for i in disassembler.disasm(code, address)
    ]
    where = list(locations)
    return KernelCode(
        name=name,
        symbol=symbol,
        isa=isa,
        llvm_ir=ir_of(dump.llvm_ir, symbol),
        asm="\n".join(asm),
        instructions=len(asm),
        vector_width=vector_width(asm, isa),
        lines=[(line, where) for line in asm],
        mapping=KERNEL_MAPPING
        + (f"; XLA compiled this fusion once with {shared}, whose code this is" if shared else ""),
        shared_with=shared,
        source=OBJECT_SOURCE,
    )


def libraries_off_dump(comp: Any, dump: MetalDump) -> MetalDump:
    """The dump of ``comp``'s program compiled once more with XLA:CPU's library fusions off
    (kernels only, no pass log), kept on ``dump`` (made once)."""
    if dump.libraries_off is None:
        options = {**(comp.program.request.compiler_options or {}), **LIBRARY_FUSIONS_OFF}
        dump.libraries_off = dump_compile(comp.lowered, comp.backend, options, passes=False)
    return dump.libraries_off


def dump_program(comp: Any) -> MetalDump:
    """:func:`dump_compile` of a :class:`~nbcompile.compilation.Compilation`'s program, with the
    compile options it was compiled with."""
    if comp.stages.compiled is None:
        raise TargetError(
            f"{comp.name} was not compiled by XLA here ({comp.target.label}), so there is no "
            "pass pipeline or kernel code to read",
            code="NBC600",
        )
    return dump_compile(comp.lowered, comp.backend, comp.program.request.compiler_options)


def measured_compile_time(comp: Any, dump: MetalDump) -> Any:
    """The :class:`~nbcompile.analysis.compile_time.CompileTime` of a Compilation's program:
    its stages' measured seconds, the XLA part split by the dumped compile (see
    nbcompile/analysis/compile_time.py). With ``--passes`` the dumped compile is the program's
    own (``dump.own``), so the split is of the very compile timed."""
    from ..analysis.compile_time import compile_time, eqns_by_line

    stages = comp.stages
    timings = stages.timings
    notes = []
    if stages.xla_compiles and "compile" in timings:
        seconds = timings["compile"]
        if dump.own:
            notes.append(
                "--passes: this compile wrote XLA's dump, so the XLA figure includes writing "
                "it, and its split into passes and code generation is of this very compile"
            )
        else:
            notes.append(
                "the split into XLA passes and code generation is in the proportion measured "
                "on one more compile of this program with XLA's dump on"
            )
    else:
        seconds = dump.seconds
        notes.append(
            "JAX's persistent cache served this program, so the XLA figure is that of the "
            "dumped compile (cache off; writing the dump included)"
        )
    return compile_time(
        trace=timings.get("trace"),
        lower=timings.get("lower"),
        compile_seconds=seconds,
        passes_share=dump.passes_share,
        by_pipeline=dump.passes.by_pipeline if dump.passes is not None else None,
        eqns=eqns_by_line(comp.graph),
        notes=notes,
    )
