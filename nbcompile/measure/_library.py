"""Kernels XLA:CPU hands to a library (YNNPACK, oneDNN): what runs them, and code to show for them.

XLA:CPU's library rewriter turns dots, and reductions together with the element-wise ops that
feed them, into ``kind=kCustom`` fusions whose ``backend_config`` names the library
(``"fusion_config":{"kind":"__ynn_fusion"}``): a 24-step ``tanh(z) * 0.5 + 0.25`` chain followed
by ``.sum()`` is one ``ynn_fusion`` (jaxlib 0.10.2 and 0.12.0.1). YNNPACK runs it; XLA writes no
code of its own for it. What can be shown instead:

* for element-wise ops and reductions, XLA's own code for *the same ops*, from one more compile
  of the program with the library fusions off (``_compat.LIBRARY_FUSIONS_OFF``), labelled as not
  what runs: :func:`stand_in_kernels` finds that compile's kernels holding the fusion's ops (by
  instruction name, which both compiles keep from the lowered module, and, for ops XLA rewrote
  without the library, e.g. a reduce split into a reduce-window and a reduce, by op name and
  source frame);
* for dots and convolutions (the library's own kernels do the work), the library and its kernel
  functions of that type, found by name in jaxlib's symbol table (:func:`library_functions`):
  YNNPACK picks one of them at run time by CPU and shape, which the dump does not say.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._compat import LIBRARY_FUSION_KINDS, jaxlib_native_library
from ..analysis.hlo import HloModule
from ..errors import TargetError
from ._kernel_code import KernelCode, short

__all__ = [
    "LibraryFusion",
    "library_call_error",
    "library_functions",
    "library_fusion",
    "stand_in_code",
    "stand_in_kernels",
]

#: ops whose work is the library's own kernels: no stand-in of XLA's is offered for them
HEAVY = ("dot", "convolution")
#: ops that move or name data without computing: not used to match kernels across compiles
_PLUMBING = frozenset(
    {"parameter", "constant", "broadcast", "bitcast", "reshape", "copy", "tuple"}
    | {"get-tuple-element", "iota"}
)
_KIND = re.compile(r'"fusion_config"\s*:\s*\{[^{}]*"kind"\s*:\s*"(__\w+)"')
_DTYPE = re.compile(r"^\(?([a-z]+[0-9]*)\[")
#: HLO element types as YNNPACK names them in its kernels (``dot_fp32_...``, ``dot_bf16_...``)
_YNN_TYPE = {"f32": "fp32", "bf16": "bf16", "f16": "fp16", "s8": "int8", "u8": "uint8"}


@dataclass(frozen=True)
class LibraryFusion:
    """A ``kind=kCustom`` fusion of XLA:CPU that a library runs: its ``library`` (YNNPACK),
    the opcodes of its body, and its dots / convolutions (``heavy``, described with shapes)."""

    name: str
    library: str
    kind: str
    opcodes: dict[str, int]
    heavy: list[str] = field(default_factory=list)
    dtype: str | None = None  # element type of the first heavy op's first operand
    members: list[Any] = field(default_factory=list, repr=False, compare=False)

    def summary(self) -> str:
        """``reduce + 72 element-wise ops`` / ``dot f32[32,64] x f32[64,64] -> f32[32,64]``."""
        if self.heavy:
            return "; ".join(self.heavy[:3]) + (" ..." if len(self.heavy) > 3 else "")
        ops = {k: v for k, v in self.opcodes.items() if k not in _PLUMBING}
        top = sorted(ops.items(), key=lambda kv: -kv[1])[:4]
        return ", ".join(f"{n} {op}" for op, n in top) or "no compute ops"


def _kernel_instructions(module: HloModule) -> dict[str, Any]:
    """{name: instruction} of the module's kernels: the instructions of its entry computation
    and of the computations its control flow calls (loop bodies, branches), not fused ones."""
    from ..analysis.compiled import _non_fused

    return {i.name: i for comp in _non_fused(module) for i in comp.instructions}


def _members(module: HloModule, instr: Any) -> list[Any]:
    from ..analysis.compiled import _members as members

    return members(module, instr)


def library_fusion(module: HloModule, name: str) -> LibraryFusion | None:
    """The :class:`LibraryFusion` named ``name`` in optimised module ``module``; None when no
    kernel of that name is a library fusion."""
    instr = _kernel_instructions(module).get(name)
    if instr is not None and instr.opcode in HEAVY:  # left unfused: XLA:CPU's runtime (Eigen)
        shapes = {i.name: i.shape for c in module.computations.values() for i in c.instructions}
        ins = [shapes.get(o, "?").split("{")[0] for o in instr.operands]
        found = _DTYPE.match(ins[0]) if ins else None
        desc = f"{instr.opcode} {' x '.join(ins)} -> {instr.shape.split('{')[0]}"
        return LibraryFusion(
            name, "Eigen", "runtime", {instr.opcode: 1}, [desc], found and found.group(1)
        )
    if instr is None or instr.opcode != "fusion" or instr.kind != "custom":
        return None
    match = _KIND.search(instr.text)
    kind = match.group(1) if match else "custom"
    library = LIBRARY_FUSION_KINDS.get(kind, f"a library ({kind})")
    every = _members(module, instr)
    members = [m for m in every if m.opcode != "parameter"]
    opcodes: dict[str, int] = {}
    for m in members:
        opcodes[m.opcode] = opcodes.get(m.opcode, 0) + 1
    shapes = {m.name: m.shape for m in every}  # a fused dot's operands are in its body
    heavy, dtype = [], None
    for m in members:
        if m.opcode in HEAVY:
            ins = [shapes.get(o, "?").split("{")[0] for o in m.operands]
            heavy.append(f"{m.opcode} {' x '.join(ins)} -> {m.shape.split('{')[0]}")
            if dtype is None and ins and (found := _DTYPE.match(ins[0])):
                dtype = found.group(1)
    return LibraryFusion(name, library, kind, opcodes, heavy, dtype, members)


def _cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux ``/proc/cpuinfo``); empty where not readable."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


#: a YNNPACK kernel name's ISA word -> the /proc/cpuinfo flag it needs (words not listed here
#: are not filtered on)
_ISA_FLAG = {
    "sse2": "sse2",
    "sse41": "sse4_1",
    "avx": "avx",
    "avx2": "avx2",
    "fma3": "fma",
    "f16c": "f16c",
    "avx512": "avx512f",
    "avx512bw": "avx512bw",
    "avx512bf16": "avx512_bf16",
    "avx512fp16": "avx512_fp16",
    "avx512vnni": "avx512_vnni",
    "avxvnni": "avx_vnni",
    "amxbf16": "amx_bf16",
    "amxint8": "amx_int8",
    "amxfp16": "amx_fp16",
}


@functools.lru_cache(maxsize=8)
def library_functions(library: str, family: str) -> tuple[tuple[str, ...], str | None]:
    """(names, the file they were read from) of ``library``'s kernel functions whose name
    starts with ``family`` (YNNPACK: ``dot_fp32``) in the jaxlib installed, found in its ELF
    symbol table's strings, those this CPU cannot run (an ISA word its flags lack) left out,
    the widest ISA first. Empty for other libraries (oneDNN generates its kernels at run
    time)."""
    path = jaxlib_native_library()
    if library != "YNNPACK" or path is None:
        return (), path
    try:
        from elftools.elf.elffile import ELFFile

        with open(path, "rb") as f:
            table = ELFFile(f).get_section_by_name(".strtab")
            strings = table.data() if table is not None else b""
    except Exception:  # not an ELF file here (macOS), or unreadable: no names
        return (), path
    names: set[str] = set()
    prefix = re.compile(rb"_ZN3ynn(\d+)" + re.escape(family.encode()))
    for m in prefix.finditer(strings):
        size, start = int(m.group(1)), m.end(1)
        names.add(strings[start : start + size].decode("ascii", "replace"))
    flags = _cpu_flags()
    runnable = [
        n
        for n in names
        if not flags or all(_ISA_FLAG.get(w, "") in flags | {""} for w in n.split("_"))
    ]
    return tuple(sorted(runnable, key=lambda n: (-_isa_rank(n), n))), path


#: ISA words by how wide / new (the widest first when examples are named)
_RANK = ("sse2", "sse41", "avx", "fma3", "avx2", "avx512", "avx512bf16", "amxbf16")


def _isa_rank(name: str) -> int:
    return max((_RANK.index(w) + 1 for w in name.split("_") if w in _RANK), default=0)


def library_call_error(fusion: LibraryFusion, with_code: Sequence[str]) -> TargetError:
    """NBC600 for a library fusion whose work is the library's own kernels (a dot, a
    convolution): names the library, the kernel and the library's functions of that kind."""
    family = f"dot_{_YNN_TYPE.get(fusion.dtype or '', fusion.dtype or '')}"
    functions, path = library_functions(fusion.library, family)
    conv = (
        " (a convolution as a stencil copy then a dot)" if "convolution" in fusion.opcodes else ""
    )
    if functions:
        where = path.rsplit("/", 1)[-1] if path else "jaxlib"
        chosen = (
            f"{fusion.library} picks its kernel{conv} at run time, by CPU and shape, among the "
            f"{len(functions)} {family} functions of {where} this CPU can run (e.g. "
            + ", ".join(f"ynn::{n}" for n in functions[:3])
            + ")"
        )
    elif fusion.library == "Eigen":
        chosen = f"XLA:CPU's runtime runs it with {_eigen_kernel(fusion)}, compiled into jaxlib"

    else:
        chosen = f"{fusion.library} picks its kernel at run time"
    known = ", ".join(with_code[:8]) or "none"
    return TargetError(
        f"{short(fusion.name)} is a{'n' if fusion.library[0] in 'AEIOU' else ''} "
        f"{fusion.library} library call ({fusion.summary()}): "
        f"{chosen}; XLA writes no code of its own for it",
        code="NBC600",
        hint=f"kernels with XLA's own code: {known}",
    )


#: HLO element types as C++ names them in XLA:CPU's Eigen kernels (``EigenConv2D<float>``)
_CPP_TYPE = {"f32": "float", "f16": "Eigen::half", "f64": "double", "bf16": "Eigen::bfloat16"}


def _eigen_kernel(fusion: LibraryFusion) -> str:
    """The Eigen code XLA:CPU's runtime runs for an unfused dot or convolution: its convolution
    thunk calls ``xla::cpu::internal::EigenConv{2,3}D<T>`` (named in jaxlib 0.10.2 and 0.12.0.1's
    symbol tables), its dot thunk Eigen's tensor contraction."""
    if "convolution" not in fusion.opcodes:
        return "Eigen's tensor contraction (xla::cpu::DotThunk)"
    rank = fusion.heavy[0].rsplit("-> ", 1)[-1].count(",") + 1 if fusion.heavy else 4
    cpp = _CPP_TYPE.get(fusion.dtype or "", fusion.dtype or "T")
    return f"xla::cpu::internal::EigenConv{max(rank - 2, 1)}D<{cpp}> (xla::cpu::ConvolutionThunk)"


def on_request_error(fusion: LibraryFusion) -> TargetError:
    """NBC600 for a library fusion of element-wise ops or reductions, when no library-off
    compile was made (the view does not compile; ``c.kernel_code`` does, on request)."""
    return TargetError(
        f"{short(fusion.name)} is a {fusion.library} library fusion ({fusion.summary()}): "
        f"{fusion.library} runs it, so XLA wrote no code of its own for it; "
        f"c.kernel_code({short(fusion.name)}) compiles the program once more with "
        f"{fusion.library} off and shows XLA's own code for these ops (not what runs)",
        code="NBC600",
        hint="the view shows that code too once c.kernel_code made it",
    )


def stand_in_kernels(
    fusion: LibraryFusion, module_on: HloModule, module_off: HloModule
) -> list[str]:
    """The kernels of ``module_off`` (the program compiled with library fusions off) that
    compute ``fusion``'s ops (of ``module_on``), in ``module_off``'s order: those holding one of
    its compute ops by name, and for its ops ``module_off`` has under no name (rewritten), those
    holding a new op of the same opcode, op name and source frame."""
    wanted = {m.name for m in fusion.members if m.opcode not in _PLUMBING}
    kernels = _kernel_instructions(module_off)
    names_off: dict[str, str] = {}  # member op -> kernel, in module_off
    members_off: dict[str, list[Any]] = {}
    for k, instr in kernels.items():
        members = _members(module_off, instr) if instr.called else [instr]
        members_off[k] = members
        for m in members:
            names_off.setdefault(m.name, k)
    found = {names_off[n] for n in wanted if n in names_off}
    rewritten = {
        (m.opcode, m.op_name, m.stack_frame_id)
        for m in fusion.members
        if m.name in wanted and m.name not in names_off and m.op_name
    }
    if rewritten:
        names_on = {i.name for c in module_on.computations.values() for i in c.instructions}
        for k, members in members_off.items():
            if any(
                (m.opcode, m.op_name, m.stack_frame_id) in rewritten and m.name not in names_on
                for m in members
            ):
                found.add(k)
    return [k for k in kernels if k in found and kernels[k].opcode == "fusion"]


def stand_in_code(
    fusion: LibraryFusion,
    kernels: Sequence[str],
    code_of: Callable[[str], KernelCode],
    locations: Sequence[Any],
) -> KernelCode:
    """The :class:`KernelCode` of library fusion ``fusion``: the code of ``kernels`` (of the
    library-off compile, ``code_of`` reads one), one after another under a ``; kernel`` line,
    every instruction carrying ``fusion``'s source locations."""
    codes = [code_of(k) for k in kernels]
    asm: list[str] = []
    lines: list[tuple[str, list[Any]]] = []
    where = list(locations)
    for code in codes:
        head = f"; {code.name}: XLA's own code with {fusion.library} off (not what runs)"
        asm.append(head)
        lines.append((head, []))
        for line, _ in code.lines:
            asm.append(line)
            lines.append((line, where))
    irs = list(dict.fromkeys(c.llvm_ir for c in codes if c.llvm_ir))
    widths = [c.vector_width for c in codes if c.vector_width]
    names = ", ".join(kernels)
    return KernelCode(
        name=fusion.name,
        symbol=", ".join(c.symbol for c in codes),
        isa=codes[0].isa,
        llvm_ir="\n".join(irs) or None,
        asm="\n".join(asm),
        instructions=sum(c.instructions for c in codes),
        vector_width=max(widths) if widths else None,
        lines=lines,
        mapping=(
            f"kernel: every instruction carries the source locations of all of {fusion.name}'s "
            "HLO ops (XLA emits no debug locations); the code is XLA's own for the same ops, "
            f"compiled with {fusion.library} off (its kernels {names}), not what runs"
        ),
        source=(
            f"XLA's own code for this fusion, compiled with {fusion.library} off — not what "
            f"runs: {fusion.library} runs {fusion.name} (object files of one more compile of the "
            "program with XLA:CPU's library fusions off, disassembled by Capstone)"
        ),
        library=fusion.library,
        stand_in=list(kernels),
    )
