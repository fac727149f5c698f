"""What every platform's kernel code shares: :class:`KernelCode`, kernel symbols, and finding the
fusion whose code another one runs (XLA compiles identical fusions once).

Used by nbcompile/measure/metal.py (XLA:CPU's object files), measure/_ptx.py (XLA:GPU's PTX)
and measure/_library.py (library fusions).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..analysis.hlo import HloModule, parse_hlo
from ..errors import TargetError

__all__ = [
    "KernelCode",
    "ir_of",
    "no_code",
    "parsed_module",
    "shared_kernel",
    "short",
    "symbols",
]

#: the most characters of a name an error message echoes (a name may be any string)
NAME_CHARS = 80


@dataclass
class KernelCode:
    """One kernel's code: ``llvm_ir`` (XLA's optimised IR of its module), ``asm`` (its machine
    code, disassembled; GPU: its PTX function), ``isa``, ``instructions`` (count),
    ``vector_width`` (bits of the widest SIMD register it uses; GPU: of its widest vector load or
    store; None where none or unknown), ``lines`` ([(asm line, [locations])]), ``mapping`` (how
    exact ``lines`` is) and ``source`` (where the code was read).

    A library fusion (``ynn_fusion``: YNNPACK runs it) has no code of XLA's own; its
    ``KernelCode`` is then XLA's own code for the same ops compiled with the library off, which
    is *not* what runs: ``library`` names the library that runs the kernel, ``stand_in`` the
    kernels of that other compile whose code ``asm`` is, and ``source`` says so."""

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
    library: str | None = None  # the library that runs this kernel (``asm`` is not its code)
    stand_in: list[str] | None = None  # the library-off compile's kernels ``asm`` is from

    @property
    def runs(self) -> bool:
        """Whether ``asm`` is the code that runs for this kernel (False for a library fusion's
        stand-in: XLA's code for the same ops, compiled with the library off)."""
        return self.library is None

    def __repr__(self) -> str:
        width = f"{self.vector_width}-bit vectors" if self.vector_width else "no vectors"
        what = (
            f", {self.library} runs it: XLA's code with {self.library} off" if self.library else ""
        )
        return (
            f"<KernelCode {self.name}: {self.instructions} {self.isa} instructions, {width}{what}>"
        )


def short(name: str) -> str:
    """``repr(name)``, cut at :data:`NAME_CHARS` characters (saying how long it was)."""
    if len(name) <= NAME_CHARS:
        return repr(name)
    return f"{name[:NAME_CHARS]!r}... ({len(name):,} characters)"


_NOT_WORD = re.compile(r"[^\w]")


def symbols(name: str) -> list[str]:
    """The symbol names XLA may give kernel ``name`` (``fusion.3`` -> ``fusion_3``)."""
    plain = _NOT_WORD.sub("_", name)
    return [name] if plain == name else [name, plain]


def ir_of(llvm_ir: dict[str, str], symbol: str) -> str | None:
    """The LLVM IR module (text) that defines ``symbol``, if dumped."""
    for text in llvm_ir.values():
        if f"@{symbol}(" in text and "define " in text:
            return text
    return None


def no_code(what: str, name: str, with_code: Sequence[str], library: str) -> TargetError:
    """NBC600 for a kernel ``name`` with no ``what`` (machine code, PTX) of XLA's own."""
    known = ", ".join(with_code[:8]) or "none"
    return TargetError(
        f"no {what} for a kernel named {short(name)} (kernels with code: {known})",
        code="NBC600",
        hint=f"use a name from c.fusions; {library} have no code of XLA's own",
    )


#: attributes that name things or carry metadata, not what is computed; attributes naming a
#: called computation (``to_apply=%region_0.1.clone``) are replaced by what it computes
_NOT_COMPUTED = ("metadata", "calls", "backend_config", "frontend_attributes")
_CALLED = ("to_apply", "body", "condition", "branch_computations", "true_computation")
_CALLED += ("false_computation",)
_REF = re.compile(r"%([^\s,(){}]+)")


def _computation_signature(
    module: HloModule, name: str, memo: dict[str, Any], depth: int = 0
) -> tuple[Any, ...] | None:
    """What computation ``name`` computes, without names or metadata: its instructions'
    opcodes, shapes, operand positions, attributes (called computations by what they compute,
    so ``%region_0.1`` and its clone ``%region_0.1.clone`` compare equal), literals."""
    if name in memo:
        return memo[name]
    body = module.computations.get(name)
    if body is None or depth > 32:
        return None
    memo[name] = None  # a cycle (none in HLO) compares unequal rather than recursing
    position: dict[str, int] = {}
    out = []
    for index, i in enumerate(body.instructions):
        position[i.name] = index
        attrs = []
        for key, value in sorted(i.attrs.items()):
            if key in _NOT_COMPUTED:
                continue
            if key in _CALLED:
                called = _REF.findall(value) or [value.strip("{} ")]
                value = tuple(_computation_signature(module, c, memo, depth + 1) for c in called)
            attrs.append((key, value))
        operands = tuple(position.get(o, o) for o in i.operands)
        out.append((i.opcode, i.shape, operands, tuple(attrs), i.literal, i.is_root))
    memo[name] = tuple(out)
    return memo[name]


def parsed_module(dump: Any, hlo: str) -> HloModule:
    """``parse_hlo(hlo)``, once per dump and module text (``dump.module``)."""
    if dump.module is None or dump.module[0] != hlo:
        dump.module = (hlo, parse_hlo(hlo))
    return dump.module[1]


def _fusion_signatures(dump: Any, hlo: str) -> dict[str, Any]:
    """{fusion name: what its body computes} of module ``hlo``'s instructions that call a
    computation, computed once per dump and module (``dump.signatures``) so that every
    kernel's look-up then costs a dict access."""
    if dump.signatures is None or dump.signatures[0] != hlo:
        module = parsed_module(dump, hlo)
        memo: dict[str, Any] = {}
        found = {
            i.name: _computation_signature(module, i.called[0], memo)
            for c in module.computations.values()
            for i in c.instructions
            if i.called
        }
        dump.signatures = (hlo, {k: v for k, v in found.items() if v is not None})
    return dump.signatures[1]


def shared_kernel(dump: Any, hlo: str | None, name: str, with_code: Sequence[str]) -> str | None:
    """The kernel with code that computes exactly what kernel ``name`` computes: XLA:CPU
    compiles identical fusions once (checked with JAX 0.10.2 and 0.12.0.1) and runs that code
    for each; identical fusions may call different copies of the same reduction computation
    (``to_apply=%region_0.1`` / ``%region_0.1.clone``), compared by what they compute."""
    if not hlo:
        return None
    signatures = _fusion_signatures(dump, hlo)
    wanted = signatures.get(name)
    if wanted is None:
        return None
    return next((k for k in with_code if signatures.get(k) == wanted), None)
