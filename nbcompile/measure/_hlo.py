"""What runs in an optimised HLO module: top-level kernels and instructions, read through
:func:`nbcompile.analysis.hlo.parse_hlo` (the one HLO text parser).

A *kernel* is an instruction of the ENTRY computation that does work: fusions, custom calls and
ops left unfused (dot, reduce, while, ...). Parameters, constants, tuples, get-tuple-element,
bitcasts, tokens and barriers are bookkeeping, not kernels (``analysis.compiled.FREE_OPS``).
Loops (``while``) and calls count as one kernel each. Every function takes the HLO text or an already parsed :class:`~nbcompile.analysis.hlo.HloModule`.
"""

from __future__ import annotations

from ..analysis.compiled import FREE_OPS
from ..analysis.hlo import HloModule, parse_hlo

__all__ = ["NOT_KERNELS", "entry_kernels", "instructions"]

NOT_KERNELS = frozenset(FREE_OPS)  # the analysis's bookkeeping ops: one definition of a kernel


def _module(hlo: str | HloModule) -> HloModule:
    return hlo if isinstance(hlo, HloModule) else parse_hlo(hlo)


def instructions(hlo: str | HloModule, entry_only: bool = False) -> list[tuple[str, str]]:
    """``(name, opcode)`` of the instructions in every computation (or only ENTRY)."""
    module = _module(hlo)
    entry = module.entry_computation
    if entry_only:
        computations = [entry] if entry is not None and entry.is_entry else []
    else:
        computations = list(module.computations.values())
    return [(inst.name, inst.opcode) for comp in computations for inst in comp.instructions]


def entry_kernels(hlo: str | HloModule) -> list[tuple[str, str]]:
    """``(name, opcode)`` of the top-level kernels of the ENTRY computation."""
    return [(n, op) for n, op in instructions(hlo, entry_only=True) if op not in NOT_KERNELS]
