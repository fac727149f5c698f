"""How a fused kernel's cost divides among the lines, modules and calls its ops came from.

A kernel's measured time (``--profile``) and its bytes at the memory peak are one figure for the
whole kernel; its member ops came from several lines. Each member op is weighed by an estimate
of its own cost from its shapes — flops (a ``dot``: 2·M·N·K; a reduction: the elements it
reads; any other op: one per result element) plus the bytes of its result — and each line,
module path and call path gets the share of the kernel that its ops weigh. So a ``dot`` fused
with the ``reduce`` that sums its result gives the matmul's line nearly all of the kernel, not
half. (XLA's cost model costs whole kernels, not the ops inside a fusion; these per-op figures
are the estimate, labelled ``"from": "estimate"`` where they are reported.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .calls import CallKinds, op_name_calls, op_name_modules
from .compiled import _contracted, _members, _module_path
from .hlo import HloModule, Instruction, shape_bytes
from .hlo import shape_elements as _elements
from .lines import Locator

__all__ = ["Shares", "kernel_shares", "op_weight"]

_FREE = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "fusion"}


@dataclass
class Shares:
    """Fractions (summing to 1 over what has one) of one kernel, per place its ops came from."""

    lines: dict[Any, float] = field(default_factory=dict)  # Location -> share
    cell_lines: dict[int, float] = field(default_factory=dict)
    modules: dict[str, float] = field(default_factory=dict)
    functions: dict[str, float] = field(default_factory=dict)


def op_weight(module: HloModule, op: Instruction) -> float:
    """One op's estimated cost: flops from its shapes plus the bytes of its result."""
    if op.opcode in _FREE:
        return 0.0
    out = float(_elements(op.shape))
    if op.opcode == "dot":
        flops = 2.0 * out * _contracted(op, module)
    elif op.opcode == "convolution":  # a rough size: the filter's elements per output
        flops = 2.0 * out * max(_operand_elements(module, op, 1), 1) ** 0.5
    elif op.opcode in ("reduce", "reduce-window"):
        flops = float(_operand_elements(module, op, 0))
    else:
        flops = out
    return flops + float(shape_bytes(op.shape))


def _operand(module: HloModule, op: Instruction, k: int) -> Instruction | None:
    comp = module.computations.get(op.computation)
    if comp is None or len(op.operands) <= k:
        return None
    return next((i for i in comp.instructions if i.name == op.operands[k]), None)


def _operand_elements(module: HloModule, op: Instruction, k: int) -> int:
    found = _operand(module, op, k)
    return _elements(found.shape) if found is not None else 1


def kernel_shares(
    module: HloModule, kernels: list[Instruction], source: Locator, kinds: CallKinds
) -> dict[str, Shares]:
    """Shares of every fusion kernel with ops from more than one place (by kernel name)."""
    out: dict[str, Shares] = {}
    for kernel in kernels:
        if kernel.opcode != "fusion":
            continue
        shares = _shares(module, _members(module, kernel), source, kinds)
        if shares is not None:
            out[kernel.name] = shares
    return out


def _shares(
    module: HloModule, members: list[Instruction], source: Locator, kinds: CallKinds
) -> Shares | None:
    weights = Shares()
    for op in members:
        w = op_weight(module, op)
        if w <= 0:
            continue
        location, visible = source.of_instruction(module, op)
        if location is not None:
            weights.lines[location] = weights.lines.get(location, 0.0) + w
        if visible is not None:
            weights.cell_lines[visible] = weights.cell_lines.get(visible, 0.0) + w
        path = op_name_modules(op.op_name, kinds) if kinds else _module_path(op.op_name)
        if path:
            weights.modules[path] = weights.modules.get(path, 0.0) + w
        call = op_name_calls(op.op_name, kinds)
        if call:
            weights.functions[call] = weights.functions.get(call, 0.0) + w
    if max(len(weights.lines), len(weights.modules), len(weights.functions)) < 2:
        return None  # one place: nothing to divide
    for table in (weights.lines, weights.cell_lines, weights.modules, weights.functions):
        total = sum(table.values())
        for key in table:
            table[key] = table[key] / total if total else 1.0 / len(table)
    return weights
