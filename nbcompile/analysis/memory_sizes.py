"""Sizes and memory spaces of HLO shapes as XLA allocates them, and the donation header.

``array_bytes`` pads a tiled layout (``f32[8,50000]{1,0:T(8,128)}``) to its first tile as XLA
does on TPU; ``memory_space`` reads ``S(n)`` (TPU: 1 is VMEM, 2 SMEM); ``split_tuple`` splits
a tuple shape's text; ``input_output_alias`` reads which outputs are written into donated
arguments from the module header.
"""

from __future__ import annotations

import re

from .hlo import DTYPE_BITS

__all__ = [
    "ALIAS_PAIR",
    "POINTER_BYTES",
    "array_bytes",
    "input_output_alias",
    "memory_space",
    "shape_index",
    "split_tuple",
]

POINTER_BYTES = 8  # a tuple's buffer is a table of pointers to its elements
_ARRAY = re.compile(r"^([a-z][a-z0-9]*)\[([^\]]*)\](?:\{([^}]*)\})?$")
_TILE = re.compile(r"\(([^()]*)\)")
_SPACE = re.compile(r"S\((\d+)\)")
_COMMENT = re.compile(r"/\*.*?\*/")
ALIAS_PAIR = re.compile(r"\{([\d,\s]*)\}\s*:\s*\(\s*(\d+)\s*,\s*\{([\d,\s]*)\}")


def _dims(text: str) -> list[int]:
    out = []
    for d in text.split(","):
        d = d.strip().lstrip("<=")
        if d:
            out.append(int(d) if d.isdigit() else 1)
    return out


def memory_space(shape: str) -> int:
    """The memory space of an array shape's layout (``S(1)``), 0 (device memory) if none."""
    brace = shape.rfind("{")
    m = _SPACE.search(shape, brace) if brace >= 0 else None
    return int(m.group(1)) if m else 0


def array_bytes(shape: str, padded: bool = True) -> int:
    """Bytes of one array shape: allocated (padded to its layout's first tile, as XLA pads TPU
    layouts) or, with ``padded=False``, elements times element size (XLA's ``ByteSizeOf``)."""
    m = _ARRAY.match(shape.strip())
    if m is None:
        return 0
    dtype, dims_text, layout = m.groups()
    bits = DTYPE_BITS.get(dtype, 8 if dtype.startswith(("f8", "f4")) else 32)
    dims = _dims(dims_text)
    if padded and layout and ":" in layout:
        order_text, _, rest = layout.partition(":")
        tiles = _TILE.findall(rest.split("S(")[0].split("E(")[0]) if "T(" in rest else []
        if tiles:
            order = [int(x) for x in order_text.split(",") if x.strip().isdigit()]
            major_to_minor = [dims[i] for i in reversed(order)] if order else (dims or [1])
            tile = [int(t) if t.strip().isdigit() else 1 for t in tiles[0].split(",")]
            rounded = list(major_to_minor) or [1]
            while len(rounded) < len(tile):
                rounded.insert(0, 1)
            for k, t in enumerate(tile, start=len(rounded) - len(tile)):
                rounded[k] = -(-rounded[k] // t) * t
            dims = rounded
    n = 1
    for d in dims:
        n *= d
    return (n * bits + 7) // 8


def split_tuple(shape: str) -> list[str] | None:
    """The element shapes of a tuple shape text, or None for an array shape."""
    shape = shape.strip()
    if not shape.startswith("("):
        return None
    inner = _COMMENT.sub("", shape[1 : shape.rfind(")")])
    parts, depth, last = [], 0, 0
    for i, ch in enumerate(inner):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(inner[last:i].strip())
            last = i + 1
    if inner[last:].strip():
        parts.append(inner[last:].strip())
    return parts


def shape_index(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.replace(" ", "").split(",") if x)


def input_output_alias(hlo_text: str) -> dict[tuple[int, ...], int]:
    """Output index -> donated parameter number, from the module header's ``input_output_alias``."""
    header = hlo_text[: hlo_text.find("\n")] if "\n" in hlo_text else hlo_text
    start = header.find("input_output_alias={")
    if start < 0:
        return {}
    depth, stop = 0, len(header)
    for pos in range(start + len("input_output_alias="), len(header)):
        depth += {"{": 1, "}": -1}.get(header[pos], 0)
        if depth == 0:
            stop = pos
            break
    block = header[start:stop]
    return {shape_index(out): int(param) for out, param, _ in ALIAS_PAIR.findall(block)}
