"""XLA:GPU's kernel code: a kernel's ``.entry`` function cut out of the PTX XLA:GPU dumped.

On a CUDA GPU (deviceless with the CUDA plugin, or present) XLA:GPU splits the program's kernels
into several LLVM modules and writes each one's PTX (``module_0666.jit_step.1.ptx``, beside
``module_0666.jit_step.1.ir-with-opt.ll``; empty for a module with no kernel) and no object
code nbcompile reads. Its LLVM IR carries no ``!dbg`` and its PTX no ``.loc``, so the mapping is
kernel granularity. Checked with JAX 0.10.2 and jax-cuda12-plugin 0.10.2, deviceless for H100
(sm_90a). Used by nbcompile/measure/metal.py.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..errors import TargetError
from ._kernel_code import KernelCode, ir_of, no_code, shared_kernel, symbols

__all__ = ["PTX_MAPPING", "PTX_SOURCE", "ptx_kernel_code", "ptx_statements", "ptx_vector_width"]

#: what ``KernelCode.mapping`` says for a GPU kernel's PTX (its declarations, labels and braces
#: carry no locations)
PTX_MAPPING = (
    "kernel: XLA:GPU emits no debug locations (no !dbg in the kernel's LLVM IR, no .loc in its "
    "PTX), so every PTX instruction carries the source locations of all the kernel's HLO ops; "
    "declarations, labels and braces carry none"
)
PTX_SOURCE = "XLA:GPU's PTX of the dumped compile (*.ptx), the kernel's .entry function as written"


_PTX_TYPE = re.compile(r"(?:bf|tf|[bfsu])(\d+)(x2)?")


def ptx_statements(line: str) -> list[str]:
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


def ptx_vector_width(asm: Sequence[str]) -> int | None:
    """Bits of the widest vector load or store per thread in PTX ``asm`` (``.v4.b32``: 128; a
    GPU thread has no SIMD registers); None when there is none."""
    statements = (stmt for line in asm for stmt in ptx_statements(line))
    widths = [b for stmt in statements if (b := _ptx_access_bits(stmt)) is not None]
    return max(widths) if widths else None


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


def ptx_entries(dump: Any) -> dict[str, tuple[str, str, str]]:
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


def ptx_kernel_code(
    dump: Any, name: str, locations: Sequence[Any], kernels: Sequence[str], hlo: str | None
) -> KernelCode:
    """:func:`kernel_code` on a CUDA GPU: the kernel's ``.entry`` function in XLA:GPU's PTX."""
    index = ptx_entries(dump)
    if not index:
        raise TargetError(
            "XLA:GPU wrote no PTX in this compile's dump, so there is no kernel code to read",
            code="NBC600",
            hint="c.passes and c.hlo show what XLA did",
        )
    with_code = [k for k in kernels if index.keys() & set(symbols(k))]
    shared = None if name in with_code else shared_kernel(dump, hlo, name, with_code)
    symbol = next((s for s in symbols(shared or name) if s in index), None)
    if symbol is None:
        raise no_code("PTX", name, with_code, "library calls (cuBLAS, cuDNN custom calls)")
    function, target, _ = index[symbol]
    asm = function.splitlines()
    llvm_ir = ir_of(dump.llvm_ir, symbol)
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
        instructions=sum(len(ptx_statements(line)) for line in asm),
        vector_width=ptx_vector_width(asm),
        lines=[(line, where if ptx_statements(line) else []) for line in asm],
        mapping=mapping,
        shared_with=shared,
        source=PTX_SOURCE,
    )
