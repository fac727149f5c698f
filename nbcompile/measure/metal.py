"""Down to the metal: XLA's dump of a program's compile, and its kernels' code.

With ``--passes`` the program's own compile writes the dump (``run_stages(dump=True)``:
``xla_dump_to`` a temporary folder and ``xla_dump_hlo_pass_re=.*``, without JAX's persistent
compilation cache, whose hit runs no XLA and dumps nothing) and :func:`read_stages_dump` reads
it; otherwise :func:`dump_compile` compiles the lowered program once more the same way. Either
keeps what the dump holds (:func:`read_dump`): the pass log
(:func:`~nbcompile.analysis.passes_log.read_pass_log`), each kernel's optimised LLVM IR
(``*.ir-with-opt.ll``) and XLA:CPU's object files (``obj-file.*.o``), with when the compile
started, when its last HLO pass was dumped and when it ended.

:func:`kernel_code` reads one kernel out of that: its symbol is found in the objects' ELF symbol
tables (pyelftools) and its machine code disassembled by Capstone — never by our own decoder.
XLA emits no LLVM debug locations for its kernels (no ``!dbg`` in the IR, checked with JAX
0.10.2), so each instruction is mapped to the source locations of the kernel's HLO ops (kernel
granularity: every instruction of a kernel carries the same locations); ``KernelCode.mapping``
says so. Checked with JAX 0.10.2 on XLA:CPU (x86-64).

On a CUDA GPU (deviceless with the CUDA plugin, or present) XLA:GPU splits the program's kernels
into several LLVM modules and writes each one's PTX (``module_0666.jit_step.1.ptx``, beside
``module_0666.jit_step.1.ir-with-opt.ll``; empty for a module with no kernel) and no
object code nbcompile reads: :func:`kernel_code` cuts the kernel's ``.entry`` function out of that
PTX as XLA wrote it (Triton's GEMM fusions included). Its LLVM IR carries no ``!dbg`` and its PTX
no ``.loc`` either, so the mapping is again kernel granularity. XLA:GPU also dumps modules of its
own beside the program's (``module_0668.fused_add.0000.cublaslt_rewriter_pipeline...``: one
fusion its cuBLASLt rewriter compiles alone); :func:`dump_compile` keeps the program's pass files
only. Checked with JAX 0.10.2 and jax-cuda12-plugin 0.10.2, deviceless for H100 (sm_90a).
"""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._compat import persistent_cache_disabled
from ..analysis.hlo import HloModule, parse_hlo
from ..analysis.passes_log import PassLog, read_pass_log
from ..errors import TargetError

__all__ = [
    "KernelCode",
    "MetalDump",
    "dump_compile",
    "kernel_code",
    "read_dump",
    "read_stages_dump",
]

#: what ``KernelCode.mapping`` says when the kernel's IR carries no debug locations
KERNEL_MAPPING = (
    "kernel: XLA emits no debug locations in its kernels' LLVM IR (no !dbg), so every "
    "instruction carries the source locations of all the kernel's HLO ops"
)
#: the same for a GPU kernel's PTX (its declarations, labels and braces carry no locations)
PTX_MAPPING = (
    "kernel: XLA:GPU emits no debug locations (no !dbg in the kernel's LLVM IR, no .loc in its "
    "PTX), so every PTX instruction carries the source locations of all the kernel's HLO ops; "
    "declarations, labels and braces carry none"
)
OBJECT_SOURCE = "XLA's object file of the dumped compile (obj-file.*.o), disassembled by Capstone"
PTX_SOURCE = "XLA:GPU's PTX of the dumped compile (*.ptx), the kernel's .entry function as written"
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
    #: (profile id, the report's ``extras["passes"]``) once built (compilation/_display.py)
    view: Any = field(default=None, repr=False, compare=False)
    #: {symbol: (ELF file, symbol)} of the objects' functions, read once (:func:`kernel_code`)
    functions: dict[str, tuple[Any, Any]] | None = field(default=None, repr=False, compare=False)
    #: (optimised module text, its fusions' signatures by name), read once (:func:`kernel_code`)
    signatures: tuple[str, dict[str, Any]] | None = field(default=None, repr=False, compare=False)
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
    lowered: Any, platform: str, compiler_options: dict[str, Any] | None = None
) -> MetalDump:
    """Compile ``lowered`` once more with XLA's dump on (persistent cache off) and read the dump."""
    from ..stages import DUMP_OPTIONS

    options = dict(compiler_options or {})
    with tempfile.TemporaryDirectory(prefix="nbcompile-dump-") as folder:
        options.update(xla_dump_to=folder, **DUMP_OPTIONS)
        # a persistent-cache hit would run no XLA and dump nothing
        with persistent_cache_disabled():
            started = time.time()
            lowered.compile(compiler_options=options)
            finished = time.time()
        return read_dump(folder, platform, started, finished)


def read_dump(
    folder: str | Path, platform: str, started: float, finished: float, *, own: bool = False
) -> MetalDump:
    """The :class:`MetalDump` of the compile that dumped to ``folder`` (its other modules'
    files are deleted first: :func:`_keep_program_module`); ``started`` / ``finished`` are that
    compile's clock, ``own`` whether it was the program's own compile."""
    root = Path(folder)
    _keep_program_module(root)
    passes = read_pass_log(str(root))
    ptx = {p.name: p.read_text() for p in sorted(root.glob("*.ptx"))}
    return MetalDump(
        platform=platform,
        passes=passes,
        llvm_ir={p.name: p.read_text() for p in sorted(root.glob("*.ir-with-opt.ll"))},
        objects={p.name: p.read_bytes() for p in sorted(root.glob("*obj-file.*.o"))},
        ptx={name: text for name, text in ptx.items() if text.strip()},
        started=started,
        finished=finished,
        own=own,
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
        return read_dump(dump.path, stages.target.platform, dump.started, dump.finished, own=True)
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


@dataclass
class KernelCode:
    """One kernel's code: ``llvm_ir`` (XLA's optimised IR of its module), ``asm`` (its machine
    code, disassembled; GPU: its PTX function), ``isa``, ``instructions`` (count),
    ``vector_width`` (bits of the widest SIMD register it uses; GPU: of its widest vector load or
    store; None where none or unknown), ``lines`` ([(asm line, [locations])]), ``mapping`` (how
    exact ``lines`` is) and ``source`` (where the code was read)."""

    name: str
    symbol: str
    isa: str
    llvm_ir: str | None
    asm: str
    instructions: int
    vector_width: int | None
    lines: list[tuple[str, list[Any]]]
    mapping: str
    shared_with: str | None = None  # the kernel whose code this one runs (XLA compiled it once)
    source: str | None = None  # where ``asm`` was read: XLA's object file, or its PTX

    def __repr__(self) -> str:
        width = f"{self.vector_width}-bit vectors" if self.vector_width else "no vectors"
        return f"<KernelCode {self.name}: {self.instructions} {self.isa} instructions, {width}>"


def _symbols(name: str) -> list[str]:
    """The symbol names XLA may give kernel ``name`` (``fusion.3`` -> ``fusion_3``)."""
    plain = re.sub(r"[^\w]", "_", name)
    return list(dict.fromkeys([name, plain]))


def _functions(objects: dict[str, bytes]) -> Iterator[tuple[Any, Any]]:
    """(ELF file, symbol) of every function defined in ``objects``."""
    import io

    from elftools.elf.elffile import ELFFile

    for blob in objects.values():
        elf = ELFFile(io.BytesIO(blob))
        table = elf.get_section_by_name(".symtab")
        for symbol in table.iter_symbols() if table is not None else ():
            if symbol["st_info"]["type"] == "STT_FUNC" and symbol["st_shndx"] != "SHN_UNDEF":
                yield elf, symbol


def _function_index(dump: MetalDump) -> dict[str, tuple[Any, Any]]:
    """{symbol name: (ELF file, symbol)} of every function in ``dump``'s objects (the first
    definition of a name), read once per dump: every kernel's look-up then costs nothing."""
    if dump.functions is None:
        index: dict[str, tuple[Any, Any]] = {}
        for elf, symbol in _functions(dump.objects):
            index.setdefault(symbol.name, (elf, symbol))
        dump.functions = index
    return dump.functions


def _find_function(
    index: dict[str, tuple[Any, Any]], names: Sequence[str]
) -> tuple[Any, str, bytes, int]:
    """(ELF file, symbol, code bytes, address) of the first of ``names`` defined in ``index``."""
    for name in names:
        if name in index:
            elf, symbol = index[name]
            start, size = symbol["st_value"], symbol["st_size"]
            data = elf.get_section(symbol["st_shndx"]).data()
            return elf, symbol.name, data[start : start + size], start
    raise KeyError(names[0])


def _disassembler(elf: Any) -> tuple[Any, str]:
    import capstone

    machine = elf.header["e_machine"]
    if machine == "EM_X86_64":
        return capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64), "x86-64"
    if machine == "EM_AARCH64":
        return capstone.Cs(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM), "aarch64"
    raise TargetError(f"kernel code for {machine} machine code is not supported", code="NBC600")


_PTX_TYPE = re.compile(r"(?:bf|tf|[bfsu])(\d+)(x2)?")


def _ptx_statements(line: str) -> list[str]:
    """The PTX instruction statements on one line (not directives, declarations, labels, braces
    or comments): one, or several where Triton's inline assembly puts them on one line
    (``mov.u32 %r1, 0x0; ... ld.global.v4.b32 { %r1, ... }, [ %rd1 + 0 ];``)."""
    code = line.split("//", 1)[0]
    statements = (part.strip().lstrip("{}").strip() for part in code.split(";")[:-1])
    return [stmt for stmt in statements if stmt and not stmt.startswith(".")]


def _ptx_access_bits(statement: str) -> int | None:
    """Bits one PTX vector load or store (``ld``/``ldu``/``st`` with ``.v2``/``.v4``/``.v8``)
    moves per thread (``ld.global.nc.v4.b32``: 128); None for any other statement."""
    words = statement.split()
    if words and words[0].startswith("@"):  # a predicate guard
        words = words[1:]
    parts = words[0].split(".") if words else []
    if not parts or parts[0] not in ("ld", "ldu", "st"):
        return None
    lanes = next((int(p[1:]) for p in parts if re.fullmatch(r"v\d+", p)), None)
    types = [m for p in parts if (m := _PTX_TYPE.fullmatch(p))]
    if lanes is None or not types:
        return None
    return lanes * int(types[-1].group(1)) * (2 if types[-1].group(2) else 1)


def vector_width(asm: Sequence[str], isa: str) -> int | None:
    """Bits of the widest SIMD register in ``asm`` (x86: xmm 128, ymm 256, zmm 512; AArch64
    NEON ``v`` registers 128); PTX (``isa`` ``ptx ...``), which has no SIMD registers: bits of
    its widest vector load or store per thread (``.v4.b32``: 128). None when none is used or the
    ISA is another."""
    if isa.startswith("ptx"):
        statements = (stmt for line in asm for stmt in _ptx_statements(line))
        widths = [b for stmt in statements if (b := _ptx_access_bits(stmt)) is not None]
        return max(widths) if widths else None
    if isa == "x86-64":
        widths = {_WIDTH[m.group(1)] for line in asm for m in _VECTOR_REGISTER.finditer(line)}
        return max(widths) if widths else None
    if isa == "aarch64":
        return 128 if any(re.search(r"\bv\d+\.", line) for line in asm) else None
    return None


_PTX_ENTRY = re.compile(r"^[ \t]*(?:\.\w+[ \t]+)*\.entry[ \t]+([\w$]+)[ \t]*\(", re.M)
_PTX_TARGET = re.compile(r"^[ \t]*\.target[ \t]+([^\n/]+)", re.M)


def _ptx_function(text: str, start: int) -> str:
    """The PTX function starting at ``start`` of ``text``: its ``.entry`` line through the brace
    that closes its body (braces in comments not counted; ``{%r1, %r2}`` operands balance)."""
    lines, depth, opened = [], 0, False
    for line in text[start:].splitlines():
        lines.append(line.rstrip())
        code = line.split("//", 1)[0]
        depth += code.count("{") - code.count("}")
        opened = opened or "{" in code
        if opened and depth <= 0:
            break
    return "\n".join(lines)


def _ptx_entries(dump: MetalDump) -> dict[str, tuple[str, str, str]]:
    """{symbol: (PTX function, target, file name)} of every kernel (``.entry``) in ``dump``'s
    PTX, read once per dump."""
    if dump.entries is None:
        index: dict[str, tuple[str, str, str]] = {}
        for file, text in dump.ptx.items():
            target = _PTX_TARGET.search(text)
            sm = target.group(1).strip() if target else "unknown target"
            for match in _PTX_ENTRY.finditer(text):
                index.setdefault(match.group(1), (_ptx_function(text, match.start()), sm, file))
        dump.entries = index
    return dump.entries


def _ir_of(llvm_ir: dict[str, str], symbol: str) -> str | None:
    for text in llvm_ir.values():
        if f"@{symbol}(" in text and "define " in text:
            return text
    return None


_NOT_COMPUTED = ("metadata", "calls", "backend_config", "frontend_attributes")


def _fused_signature(module: HloModule, kernel: str, instr: Any = None) -> tuple[Any, ...] | None:
    """What a fusion computes, without names or metadata (None for no such fusion)."""
    instr = instr or next(
        (i for c in module.computations.values() for i in c.instructions if i.name == kernel),
        None,
    )
    body = module.computations.get(instr.called[0]) if instr and instr.called else None
    if body is None:
        return None
    position: dict[str, int] = {}
    out = []
    for index, i in enumerate(body.instructions):
        position[i.name] = index
        attrs = tuple(sorted((k, v) for k, v in i.attrs.items() if k not in _NOT_COMPUTED))
        operands = tuple(position.get(o, o) for o in i.operands)
        out.append((i.opcode, i.shape, operands, attrs, i.literal, i.is_root))
    return tuple(out)


def _fusion_signatures(dump: MetalDump, hlo: str) -> dict[str, Any]:
    """{instruction name: :func:`_fused_signature`} of module ``hlo``'s fusions, computed once
    per dump and module (every kernel's look-up then costs a dict access)."""
    if dump.signatures is None or dump.signatures[0] != hlo:
        module = parse_hlo(hlo)
        found = {
            i.name: _fused_signature(module, i.name, i)
            for c in module.computations.values()
            for i in c.instructions
            if i.called
        }
        dump.signatures = (hlo, {k: v for k, v in found.items() if v is not None})
    return dump.signatures[1]


def _shared_kernel(
    dump: MetalDump, hlo: str | None, name: str, with_code: Sequence[str]
) -> str | None:
    """The kernel with code that computes exactly what kernel ``name`` computes: XLA:CPU
    compiles identical fusions once (checked with JAX 0.10.2) and runs that code for each."""
    if not hlo:
        return None
    signatures = _fusion_signatures(dump, hlo)
    wanted = signatures.get(name)
    if wanted is None:
        return None
    return next((k for k in with_code if signatures.get(k) == wanted), None)


def _no_code(what: str, name: str, with_code: Sequence[str], library: str) -> TargetError:
    """NBC600 for a kernel ``name`` with no ``what`` (machine code, PTX) of XLA's own."""
    known = ", ".join(with_code[:8]) or "none"
    return TargetError(
        f"no {what} for a kernel named {name!r} (kernels with code: {known})",
        code="NBC600",
        hint=f"use a name from c.fusions; {library} have no code of XLA's own",
    )


def kernel_code(
    dump: MetalDump,
    name: str,
    locations: Sequence[Any],
    kernels: Sequence[str] = (),
    hlo: str | None = None,
) -> KernelCode:
    """:class:`KernelCode` of kernel ``name`` (as in ``c.fusions``) from ``dump``; ``locations``
    are the kernel's source locations, ``kernels`` the program's kernel names and ``hlo`` its
    optimised module (to find the code of a fusion XLA compiled once for several)."""
    if dump.platform == "tpu":
        raise TargetError(
            "kernel code is not available on TPU: the TPU compiler is closed (libtpu) and "
            "writes no kernel IR or machine code nbcompile can read",
            code="NBC600",
            hint="c.passes and c.hlo show what XLA did before the TPU back end",
        )
    if dump.platform in ("cuda", "gpu"):
        return _ptx_kernel_code(dump, name, locations, kernels, hlo)
    if dump.platform != "cpu":
        raise TargetError(
            f"kernel code is read on CPU and CUDA GPUs (PTX) only, not on {dump.platform}",
            code="NBC600",
            hint="compile with --backend cpu to see XLA:CPU's code for the same program",
        )
    index = _function_index(dump)
    with_code = [k for k in kernels if index.keys() & set(_symbols(k))]
    shared = None if name in with_code else _shared_kernel(dump, hlo, name, with_code)
    try:
        elf, symbol, code, address = _find_function(index, _symbols(shared or name))
    except KeyError:
        raise _no_code(
            "machine code", name, with_code, "library calls (dots, convolutions)"
        ) from None
    disassembler, isa = _disassembler(elf)
    asm = [
        f"{i.address:6x}:  {i.mnemonic} {i.op_str}".rstrip()
        for i in disassembler.disasm(code, address)
    ]
    where = list(locations)
    return KernelCode(
        name=name,
        symbol=symbol,
        isa=isa,
        llvm_ir=_ir_of(dump.llvm_ir, symbol),
        asm="\n".join(asm),
        instructions=len(asm),
        vector_width=vector_width(asm, isa),
        lines=[(line, where) for line in asm],
        mapping=KERNEL_MAPPING
        + (f"; XLA compiled this fusion once with {shared}, whose code this is" if shared else ""),
        shared_with=shared,
        source=OBJECT_SOURCE,
    )


def _ptx_kernel_code(
    dump: MetalDump, name: str, locations: Sequence[Any], kernels: Sequence[str], hlo: str | None
) -> KernelCode:
    """:func:`kernel_code` on a CUDA GPU: the kernel's ``.entry`` function in XLA:GPU's PTX."""
    index = _ptx_entries(dump)
    if not index:
        raise TargetError(
            "XLA:GPU wrote no PTX in this compile's dump, so there is no kernel code to read",
            code="NBC600",
            hint="c.passes and c.hlo show what XLA did",
        )
    with_code = [k for k in kernels if index.keys() & set(_symbols(k))]
    shared = None if name in with_code else _shared_kernel(dump, hlo, name, with_code)
    symbol = next((s for s in _symbols(shared or name) if s in index), None)
    if symbol is None:
        raise _no_code("PTX", name, with_code, "library calls (cuBLAS, cuDNN custom calls)")
    function, target, _ = index[symbol]
    asm = function.splitlines()
    llvm_ir = _ir_of(dump.llvm_ir, symbol)
    where = list(locations)
    mapping = PTX_MAPPING
    if (llvm_ir and "!dbg" in llvm_ir) or re.search(r"^\s*\.loc\s", function, re.M):
        mapping = (
            "kernel: the kernel carries debug locations (to XLA's generated code, not to the "
            "cell), not read here, so every PTX instruction carries the source locations of all "
            "the kernel's HLO ops; declarations, labels and braces carry none"
        )
    if shared:
        mapping += f"; XLA compiled this fusion once with {shared}, whose code this is"
    return KernelCode(
        name=name,
        symbol=symbol,
        isa=f"ptx {target}",
        llvm_ir=llvm_ir,
        asm=function,
        instructions=sum(len(_ptx_statements(line)) for line in asm),
        vector_width=vector_width(asm, "ptx"),
        lines=[(line, where if _ptx_statements(line) else []) for line in asm],
        mapping=mapping,
        shared_with=shared,
        source=PTX_SOURCE,
    )


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
