"""A small reader for optimised HLO text: computations, instructions, shapes and their bytes.

Only what the target views need (kernel counts, collectives, op sets). It reads the text that
``Compiled.as_text()`` prints on every backend (CPU, TPU, GPU), including TPU tiled layouts such
as ``{1,0:T(8,128)}`` and tuple-shaped results.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["Computation", "Instruction", "parse_hlo", "shape_bytes"]

_DTYPE_BYTES: dict[str, float] = {
    "pred": 1, "s2": 0.25, "u2": 0.25, "s4": 0.5, "u4": 0.5, "s8": 1, "u8": 1,
    "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4,
    "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16, "token": 0,
}  # fmt: skip
_ARRAY = re.compile(r"\b([a-z]\w*)\[([0-9,]*)\]")
_HEADER = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*\(.*\)\s*->\s*.*\{\s*$")
_INSTR = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_OPCODE = re.compile(r"^([a-z][\w\-]*)\(")
_METADATA_OP_NAME = re.compile(r'op_name="([^"]*)"')


def shape_bytes(shape: str) -> int:
    """Bytes of every array in an HLO shape string (tuples summed; layouts ignored)."""
    total = 0.0
    for dtype, dims in _ARRAY.findall(shape):
        size = _DTYPE_BYTES.get(dtype.lower())
        if size is None:
            size = 1 if dtype.lower().startswith("f8") else 4
        count = 1
        for dim in filter(None, dims.split(",")):
            count *= int(dim)
        total += size * count
    return int(total)


def array_shapes(shape: str) -> list[tuple[str, tuple[int, ...]]]:
    """``[(dtype, dims), ...]`` for each array in an HLO shape string."""
    return [
        (dtype, tuple(int(d) for d in dims.split(",") if d))
        for dtype, dims in _ARRAY.findall(shape)
    ]


@dataclass
class Instruction:
    """One HLO instruction: ``name = shape opcode(operands), attributes``."""

    name: str
    opcode: str
    shape: str
    operands: str
    attributes: str
    is_root: bool = False

    @property
    def operand_names(self) -> list[str]:
        """Names of the operands (``%a, %b`` or ``f32[2]{0} %a, ...`` printing)."""
        return re.findall(r"%([\w.\-]+)", self.operands)

    @property
    def op_name(self) -> str | None:
        """The JAX source op name from ``metadata={op_name=...}``, if printed."""
        match = _METADATA_OP_NAME.search(self.attributes)
        return match.group(1) if match else None

    def attribute(self, key: str) -> str | None:
        """The raw text of ``key=VALUE`` (balanced braces/brackets kept), or None."""
        start = self.attributes.find(key + "=")
        while start > 0 and self.attributes[start - 1] not in " ,":
            start = self.attributes.find(key + "=", start + 1)
        if start < 0:
            return None
        return _balanced_value(self.attributes, start + len(key) + 1)


@dataclass
class Computation:
    """A named HLO computation and its instructions in printed order."""

    name: str
    is_entry: bool
    instructions: list[Instruction] = field(default_factory=list)


def _balanced_value(text: str, i: int) -> str:
    """The value starting at ``text[i]``, up to the first top-level ``,`` or end."""
    depth = 0
    in_string = False
    start = i
    while i < len(text):
        ch = text[i]
        if in_string:
            if ch == "\\":
                i += 1
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[(":
            depth += 1
        elif ch in "}])" and depth > 0:
            depth -= 1
        elif ch == "," and depth == 0:
            break
        i += 1
    return text[start:i].strip()


def _split_shape(rest: str) -> tuple[str, str]:
    """Split ``SHAPE opcode(...)...`` into the shape text and the remainder."""
    if rest.startswith("("):
        depth = 0
        for i, ch in enumerate(rest):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0:
                return rest[: i + 1], rest[i + 1 :].lstrip()
    # a layout may hold spaces only inside braces: cut at the first space outside them
    depth = 0
    for i, ch in enumerate(rest):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == " " and depth == 0:
            return rest[:i], rest[i + 1 :].lstrip()
    return rest, ""


def _parse_instruction(line: str) -> Instruction | None:
    match = _INSTR.match(line)
    if not match:
        return None
    shape, tail = _split_shape(match.group(3))
    op = _OPCODE.match(tail)
    if not op:
        return None
    depth = 0
    end = len(tail)
    for i in range(op.end() - 1, len(tail)):
        depth += tail[i] == "("
        depth -= tail[i] == ")"
        if depth == 0:
            end = i
            break
    operands = tail[op.end() : end]
    attributes = tail[end + 1 :].lstrip(", ")
    return Instruction(
        match.group(2), op.group(1), shape, operands, attributes, bool(match.group(1))
    )


def parse_hlo(text: str) -> list[Computation]:
    """Computations of an HLO module text, entry computation included (``is_entry``)."""
    computations: list[Computation] = []
    current: Computation | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if current is None:
            header = _HEADER.match(stripped)
            if header and not stripped.startswith("HloModule"):
                current = Computation(header.group(2), bool(header.group(1)))
            continue
        if stripped == "}":
            computations.append(current)
            current = None
            continue
        instruction = _parse_instruction(line)
        if instruction is not None:
            current.instructions.append(instruction)
    return computations
