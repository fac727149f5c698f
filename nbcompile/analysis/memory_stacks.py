"""A loop's stacked buffers: which elements of a ``while``'s state its body writes or reads one
slice of per iteration (a scan's stacked outputs and inputs), and how much of them holds data
in iteration k (used by ``memory_loops`` to fill ``steps[*].written`` / ``.unread``).

Every look-up across the module (an instruction by name, the ``call`` that calls a computation,
the readers of a value) goes through one :class:`ModuleIndex`, built once per module: a program
with hundreds of loops asks these questions for each of them, and answering each by walking
the whole module made ``--memory`` quadratic in the program's size.
"""

from __future__ import annotations

import re

from .hlo import HloModule, Instruction
from .memory_sizes import array_bytes, split_tuple

__all__ = ["Fill", "ModuleIndex", "fill_at", "stack_slices"]

Fill = tuple[int, int, int]  # (empty, written, unread) of the loops around a step
Stack = tuple[int, str, int]  # (bytes, "write" | "read", slices)


class ModuleIndex:
    """Instructions by computation and name, each computation's caller (a ``call``), and each
    value's readers, over the computations that run as such (the entry, loop bodies, calls;
    not fusions' bodies, which XLA may copy an op into many times): made once per module."""

    def __init__(self, module: HloModule) -> None:
        from .compiled import _non_fused

        self.module = module
        self.by_comp: dict[str, dict[str, Instruction]] = {}
        self.caller: dict[str, Instruction] = {}
        self.readers: dict[str, list[Instruction]] = {}
        for comp in _non_fused(module):
            self.by_comp[comp.name] = {i.name: i for i in comp.instructions}
            for i in comp.instructions:
                if i.opcode == "call":
                    for name in i.called:
                        self.caller.setdefault(name, i)
                for operand in i.operands:
                    if operand not in self.readers:
                        self.readers[operand] = []
                    self.readers[operand].append(i)


def stack_slices(
    module: HloModule, loop: Instruction, index: ModuleIndex | None = None
) -> list[Stack]:
    """The stacked buffers of a ``while``: ``(bytes, "write" | "read", slices)`` for each
    loop-state element its body writes one slice of (an in-place ``dynamic-update-slice``) per
    iteration, or reads one slice of (a ``dynamic-slice``) and nothing after the loop reads
    (its data is used up slice by slice); its leading dimension is the slices."""
    index = index or ModuleIndex(module)
    comp = module.computations.get(loop.attrs.get("body", "").lstrip("%"))
    if comp is None:
        return []
    by_name = index.by_comp.get(comp.name, {})
    element: dict[str, tuple[int, str]] = {}  # a loop-state element -> (index, shape)
    params = [i for i in comp.instructions if i.opcode == "parameter"]
    for i in comp.instructions:
        src = by_name.get(i.operands[0]) if i.operands else None
        if i.opcode == "get-tuple-element" and src is not None and src.opcode == "parameter":
            element[i.name] = (int(i.attrs.get("index", "0")), i.shape)
    for p in params:  # jaxlib 0.12 prints an element of a tuple operand as ``%param#3``
        for k, shape in enumerate(split_tuple(p.shape) or []):
            element[f"{p.name}#{k}"] = (k, shape)
    out: dict[int, Stack] = {}
    for i in comp.instructions:
        for k, operand in enumerate(i.operands):
            name = _through_bitcasts(by_name, operand)
            if name not in element:
                continue
            how = _slice_use(module, i, k)
            if how is None:
                continue
            number, shape = element[name]
            dims = re.findall(r"\[([\d,]*)\]", shape)
            lead = int(dims[0].split(",")[0]) if dims and dims[0] else 0
            used_up = (
                how == "read"
                and _origin(index, loop, number) == "while"
                and not _read_after(index, loop, number)
            )
            if lead > 1 and (how == "write" or used_up):
                out.setdefault(number, (array_bytes(shape), how, lead))
    return list(out.values())


def _origin(index: ModuleIndex, loop: Instruction, number: int) -> str:
    """What made the data of element ``number`` of the loop's initial state: ``"while"`` (an
    earlier loop wrote it: a scan's stacked residuals), ``"parameter"`` (an argument) or
    ``"other"``, followed through copies, tuples and the calls XLA:CPU wraps loops in."""
    comps = index.module.computations
    comp, name, path = loop.computation, (loop.operands or [""])[0], [number]
    for _ in range(32):
        base, _, element = name.partition("#")
        if element:  # ``%x#3``: element 3 of x (jaxlib 0.12's printing)
            name, path = base, [int(element), *path]
            continue
        instr = index.by_comp.get(comp, {}).get(name)
        if instr is None:
            return "other"
        if instr.opcode == "tuple" and path:
            if path[0] >= len(instr.operands):
                return "other"
            name, path = instr.operands[path[0]], path[1:]
        elif instr.opcode == "get-tuple-element" and instr.operands:
            name, path = instr.operands[0], [int(instr.attrs.get("index", "0")), *path]
        elif instr.opcode in ("bitcast", "copy") and instr.operands:
            name = instr.operands[0]
        elif instr.opcode == "while":
            return "while"
        elif instr.opcode == "call" and instr.called:
            root = comps[instr.called[0]].root if instr.called[0] in comps else None
            if root is None:
                return "other"
            comp, name = instr.called[0], root.name
        elif instr.opcode == "parameter":
            if comp == index.module.entry:
                return "parameter"
            caller = index.caller.get(comp)
            k = int(instr.literal) if (instr.literal or "").isdigit() else 0
            if caller is None or k >= len(caller.operands):
                return "other"
            comp, name = caller.computation, caller.operands[k]
        else:
            return "other"
    return "other"


def _read_after(index: ModuleIndex, loop: Instruction, number: int) -> bool:
    """Whether element ``number`` of the loop's result is read after it (through the "small
    call" XLA:CPU wraps a loop in, where the loop is that call's result)."""
    node, comp_name = loop, loop.computation
    for _ in range(4):
        comp = index.module.computations.get(comp_name)
        if comp is None:
            return True
        if any(i.computation == comp_name for i in index.readers.get(f"{node.name}#{number}", ())):
            return True
        for i in index.readers.get(node.name, ()):
            if i.computation == comp_name and (
                i.opcode != "get-tuple-element" or i.attrs.get("index") == str(number)
            ):
                return True
        if comp.root is not node:
            return False
        caller = index.caller.get(comp_name)
        if caller is None:
            return True  # the loop's state is the program's output
        node, comp_name = caller, caller.computation
    return True


def _through_bitcasts(by_name: dict[str, Instruction], name: str) -> str:
    seen = 0
    while name in by_name and by_name[name].opcode == "bitcast" and seen < 8:
        name = by_name[name].operands[0] if by_name[name].operands else name
        seen += 1
    return name


def _slice_use(module: HloModule, instr: Instruction, k: int) -> str | None:
    """How ``instr`` uses its operand ``k``: ``write`` (updated in place, one slice),
    ``read`` (one slice read) or None."""
    if instr.opcode == "dynamic-update-slice":
        return "write" if k == 0 else None
    if instr.opcode == "dynamic-slice":
        return "read" if k == 0 else None
    if instr.opcode != "fusion" or not instr.called:
        return None
    comp = module.computations.get(instr.called[0])
    if comp is None:
        return None
    param = next(
        (i for i in comp.instructions if i.opcode == "parameter" and i.literal == str(k)), None
    )
    if param is None:
        return None
    by_name = {i.name: i for i in comp.instructions}
    for i in comp.instructions:
        if not i.operands or _through_bitcasts(by_name, i.operands[0]) != param.name:
            continue
        if i.opcode == "dynamic-update-slice":
            return "write"
        if i.opcode == "dynamic-slice":
            return "read"
    return None


def fill_at(stacks: list[Stack], k: int) -> Fill:
    """(bytes holding no needed data, bytes written, bytes still to read) of the stacked
    buffers during iteration k: an output stack has k + 1 slices written (this iteration's
    included), a used-up input stack still holds its slices from this iteration's on."""
    empty = written = unread = 0
    for nbytes, how, slices in stacks:
        per = nbytes / slices
        if how == "write":
            done = round(per * min(k + 1, slices))
            written += done
            empty += nbytes - done
        else:
            left = round(per * max(slices - k, 0))
            unread += left
            empty += nbytes - left
    return empty, written, unread
