"""Just enough optimised-HLO text parsing to count what runs: top-level kernels and ops.

A *kernel* is an instruction of the ENTRY computation that does work: fusions, custom calls and
ops left unfused (dot, reduce, while, ...). Parameters, constants, tuples, get-tuple-element and
bitcasts are bookkeeping, not kernels. Loops (``while``) and calls count as one kernel each.
"""

from __future__ import annotations

import re

__all__ = ["NOT_KERNELS", "entry_kernels", "instructions"]

NOT_KERNELS = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast"})
_LHS = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*")
_OPCODE = re.compile(r"\s*([\w\-]+)\(")


def _opcode(rest: str) -> str | None:
    """Opcode of an instruction right-hand side ``SHAPE opcode(operands), attrs``."""
    if rest.startswith("("):  # tuple shape: skip to its closing parenthesis
        depth = 0
        for i, ch in enumerate(rest):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0:
                rest = rest[i + 1 :]
                break
    else:
        rest = rest.split(" ", 1)[1] if " " in rest else ""
    m = _OPCODE.match(rest)
    return m.group(1) if m else None


def instructions(hlo_text: str, entry_only: bool = False) -> list[tuple[str, str]]:
    """``(name, opcode)`` of the instructions in every computation (or only ENTRY)."""
    found: list[tuple[str, str]] = []
    inside = False
    for line in hlo_text.splitlines():
        if not inside:
            header = line.startswith("ENTRY") if entry_only else line.rstrip().endswith("{")
            inside = header and not line.startswith(("HloModule", " "))
            continue
        if line.startswith("}"):
            if entry_only:
                break
            inside = False
            continue
        m = _LHS.match(line)
        if m:
            op = _opcode(line[m.end() :])
            if op:
                found.append((m.group(1), op))
    return found


def entry_kernels(hlo_text: str) -> list[tuple[str, str]]:
    """``(name, opcode)`` of the top-level kernels of the ENTRY computation."""
    return [(n, op) for n, op in instructions(hlo_text, entry_only=True) if op not in NOT_KERNELS]
