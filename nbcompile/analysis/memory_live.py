"""Buffer live ranges over XLA's schedule of an optimised module (pure: HLO text in, data out).

The optimised module of a compiled executable is *scheduled* (``is_scheduled=true``): its ENTRY
computation lists instructions in the order they run. This module follows XLA's own liveness
rules (``HloDataflowAnalysis`` / ``HloLiveRange``) on that order:

* every instruction defines a value for each array in its result, except ops that only forward
  a value: ``bitcast``, ``get-tuple-element``, ``tuple`` elements, ``opt-barrier``,
  ``add-dependency``, ``copy-done`` (the copy-start destination), the ``*-done`` half of async
  pairs, ``while`` (loop state is updated in place) and in-place ops (``dynamic-update-slice``,
  fusions rooted in one, ``output_to_operand_aliasing``);
* a value lives from the step that defines it to the last step that reads it (inclusive);
  entry parameters from step 0, outputs to the end;
* sizes are the *allocated* sizes: layouts with tiles (``{1,0:T(8,128)}`` on TPU) are padded as
  XLA pads them, tuples cost their pointer table; memory spaces other than the default
  (``S(1)``: TPU VMEM, ...) are kept apart from device memory.

Loops, branches and calls are not flattened: their bodies' temporaries are added at the step of
the ``while`` / ``conditional`` / ``call`` as the body's own peak (the values live at that peak).
The tests compare every array value's range with XLA's ``*-live-range.txt`` dump.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .hlo import Computation, HloModule, Instruction
from .memory_sizes import (
    ALIAS_PAIR,
    POINTER_BYTES,
    array_bytes,
    input_output_alias,
    memory_space,
    shape_index,
    split_tuple,
)

__all__ = ["LiveValue", "Liveness", "liveness"]

_LAYOUT = re.compile(r"\{[^{}]*\}")
# Ops whose result is (a view of) an operand: no new device memory.
_FORWARD = {
    "bitcast",
    "add-dependency",
    "domain",
    "opt-barrier",
    "all-reduce-done",
    "async-update",
    "copy-done",
}
_CONTROL = ("while", "conditional", "call")
_ELEMENTWISE = {
    "abs",
    "add",
    "and",
    "atan2",
    "cbrt",
    "ceil",
    "clamp",
    "compare",
    "complex",
    "convert",
    "cosine",
    "divide",
    "exponential",
    "exponential-minus-one",
    "floor",
    "imag",
    "is-finite",
    "log",
    "log-plus-one",
    "logistic",
    "maximum",
    "minimum",
    "multiply",
    "negate",
    "not",
    "or",
    "popcnt",
    "power",
    "real",
    "remainder",
    "round-nearest-afz",
    "round-nearest-even",
    "rsqrt",
    "select",
    "shift-left",
    "shift-right-arithmetic",
    "shift-right-logical",
    "sign",
    "sine",
    "sqrt",
    "subtract",
    "tan",
    "tanh",
    "xor",
    "erf",
}


@dataclass(slots=True)
class LiveValue:
    """One value XLA allocates: defined by ``instruction`` at ``index`` (``()`` for an array
    result, ``(1,)`` for element 1 of a tuple result), live over steps ``start..end``."""

    instruction: str
    index: tuple[int, ...]
    shape: str
    bytes: int
    space: int
    start: int
    end: int
    kind: str = "temporary"  # parameter | output | constant | temporary | table
    users: list[str] = field(default_factory=list)
    computation: str = ""
    aliased_parameter: int | None = None  # an output written into a donated parameter
    counted_end: int | None = None  # last step it holds its own bytes (its buffer handed over)
    unpadded: int = 0  # XLA's ByteSizeOf(value shape): what its live-range dump prints
    xla_moment_bytes: int = 0  # ByteSizeOf(defining instruction's shape): sizes its peak moment

    @property
    def label(self) -> str:
        return self.instruction + "{" + ",".join(map(str, self.index)) + "}"


# A value tree: a LiveValue (array) or (table, [children]) for a tuple.
Tree = "LiveValue | tuple[LiveValue | None, list]"


@dataclass
class Liveness:
    """Values of one computation over its schedule; ``nested[step]`` holds the values live at the
    peak of the loop/branch/call bodies run at that step."""

    computation: str
    steps: list[Instruction]
    values: list[LiveValue]
    nested: dict[int, list[LiveValue]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _leaves(tree: object) -> list[LiveValue]:
    if tree is None:
        return []
    if isinstance(tree, LiveValue):
        return [tree]
    table, children = tree  # type: ignore[misc]
    out = [table] if table is not None else []
    for child in children:
        out.extend(_leaves(child))
    return out


def _element(tree: object, index: int) -> object:
    if isinstance(tree, tuple) and 0 <= index < len(tree[1]):
        return tree[1][index]
    return tree  # malformed: keep the whole operand alive rather than lose it


def _at(tree: object, path: tuple[int, ...]) -> object:
    for i in path:
        tree = _element(tree, i)
    return tree


class _Builder:
    def __init__(self, module: HloModule, platform: str) -> None:
        self.module = module
        self.platform = platform

    def allocated(self, size: int) -> int:
        # TPU allocations are whole 512-byte granules (a padded f32[] scalar takes 512 bytes)
        return -(-size // 512) * 512 if self.platform == "tpu" else size

    def value(
        self, instr: Instruction, index: tuple[int, ...], shape: str, step: int, kind: str
    ) -> LiveValue:
        elements = split_tuple(shape)
        if elements is None:
            size, unpadded, space = (
                array_bytes(shape),
                array_bytes(shape, False),
                memory_space(shape),
            )
        else:
            size = unpadded = POINTER_BYTES * len(elements)
            space, kind = 0, "table"
        whole = split_tuple(instr.shape)
        moment = (
            POINTER_BYTES * len(whole) if whole is not None else array_bytes(instr.shape, False)
        )
        return LiveValue(
            instr.name,
            index,
            shape,
            self.allocated(size),
            space,
            step,
            step,
            kind,
            computation=instr.computation,
            unpadded=unpadded,
            xla_moment_bytes=moment,
        )

    def new(
        self,
        instr: Instruction,
        shape: str,
        index: tuple[int, ...],
        step: int,
        kind: str = "temporary",
    ) -> object:
        elements = split_tuple(shape)
        if elements is None:
            return self.value(instr, index, shape, step, kind)
        table = self.value(instr, index, shape, step, kind)
        return (
            table,
            [self.new(instr, s, (*index, i), step, kind) for i, s in enumerate(elements)],
        )

    def in_place_operand(self, instr: Instruction) -> int | None:
        """The operand a fusion rooted in dynamic-update-slice / scatter updates in place."""
        if instr.opcode in ("dynamic-update-slice", "scatter"):
            return 0
        if instr.opcode != "fusion" or not instr.called:
            return None
        comp = self.module.computations.get(instr.called[0])
        root = comp.root if comp is not None else None
        if root is None or root.opcode not in ("dynamic-update-slice", "scatter"):
            return None
        by_name = {i.name: i for i in comp.instructions}
        src = by_name.get(root.operands[0]) if root.operands else None
        while src is not None and src.opcode == "bitcast" and src.operands:
            src = by_name.get(src.operands[0])
        if src is None or src.opcode != "parameter" or not (src.literal or "").isdigit():
            return None
        return int(src.literal)

    def result(self, instr: Instruction, ops: list[object], step: int) -> object:
        """The value tree of ``instr``'s result, defining new values where XLA does."""
        code = instr.opcode
        if code in _FORWARD or code == "while":
            if code == "copy-done":
                return _element(ops[0], 0) if ops else None
            return ops[0] if ops else None
        if code == "get-tuple-element":
            return _element(ops[0], int(instr.attrs.get("index", "0"))) if ops else None
        if code == "tuple":
            return (self.value(instr, (), instr.shape, step, "table"), list(ops))
        if code == "copy-start":  # (destination, source, context)
            tree = self.new(instr, instr.shape, (), step)
            if isinstance(tree, tuple) and len(tree[1]) > 1 and ops:
                tree[1][1] = ops[0]
            return tree
        if code.endswith("-done") or code == "async-done":
            return _element(ops[0], 1) if ops else None
        if code.endswith("-start") or code in ("async-start", "send"):
            tree = self.new(instr, instr.shape, (), step)
            if isinstance(tree, tuple) and tree[1] and ops:
                first = tree[1][0]  # the operands: a tuple of them (own pointer table) or one
                tree[1][0] = (first[0], list(ops)) if isinstance(first, tuple) else ops[0]
                wrapped = tree[1][1] if len(tree[1]) > 1 else None
                if isinstance(first, tuple) and isinstance(wrapped, LiveValue):
                    # an async op printed folded (``slice-start(...)``, no ``calls=``): in XLA's
                    # own module its result is the wrapped computation's root, which sizes
                    # XLA's peak moment by its own shape, not by the async tuple's table
                    wrapped.xla_moment_bytes = wrapped.unpadded
            return tree
        tree = self.new(instr, instr.shape, (), step)
        aliasing = (
            instr.attrs.get("output_to_operand_aliasing") if "aliasing" in instr.tail else None
        )
        if aliasing:
            for out_idx, operand, op_idx in ALIAS_PAIR.findall(aliasing):
                if int(operand) < len(ops):
                    tree = _replace(
                        tree, shape_index(out_idx), _at(ops[int(operand)], shape_index(op_idx))
                    )
        elif (
            (k := self.in_place_operand(instr)) is not None
            and k < len(ops)
            and not isinstance(tree, tuple)
        ):
            tree = ops[k]
        return tree

    def flatten(self, comp: Computation) -> list[tuple[Instruction, Instruction | None]]:
        """The schedule with each async op's wrapped computation run just before its
        ``async-start`` (as XLA's ``HloLiveRange::FlattenSchedule`` orders it)."""
        out: list[tuple[Instruction, Instruction | None]] = []
        for instr in comp.instructions:
            if instr.opcode == "async-start":
                for name in instr.called:
                    wrapped = self.module.computations.get(name)
                    out.extend((w, instr) for w in (wrapped.instructions if wrapped else []))
            out.append((instr, None))
        return out

    def run(self, comp: Computation, entry: bool, io_alias: dict[tuple[int, ...], int]) -> Liveness:
        order = self.flatten(comp)
        steps = [instr for instr, _ in order]
        end = len(steps)
        trees: dict[str, object] = {}
        values: list[LiveValue] = []
        nested: dict[int, list[LiveValue]] = {}
        live = Liveness(comp.name, steps, values, nested)
        seen: set[int] = set()

        def record(tree: object) -> None:
            for v in _leaves(tree):
                if id(v) not in seen:
                    seen.add(id(v))
                    values.append(v)

        wrapped_root: dict[str, object] = {}
        for step, (instr, async_start) in enumerate(order):
            if async_start is not None and instr.opcode == "parameter":
                # a wrapped computation's parameter is the async-start's operand itself
                k = int(instr.literal) if (instr.literal or "").isdigit() else 0
                operand = async_start.operands[k] if k < len(async_start.operands) else None
                tree = trees.get(operand) if operand else None
                for v in _leaves(tree):
                    v.end = max(v.end, step)
                trees[instr.name] = tree
                continue
            ops = [trees.get(o) for o in instr.operands]
            read = ops
            if instr.opcode == "get-tuple-element" and ops and isinstance(ops[0], tuple):
                # reads the tuple's pointer table and the one element it extracts
                picked = _element(ops[0], int(instr.attrs.get("index", "0")))
                read = [ops[0][0], picked]
            for tree in read:
                for v in _leaves(tree):
                    v.end = max(v.end, step)
                    v.users.append(instr.name)
            if instr.opcode == "parameter":
                kind = "parameter" if entry else "body-parameter"
                tree = self.new(instr, instr.shape, (), 0 if entry else step, kind)
            elif instr.opcode == "constant":
                tree = self.new(instr, instr.shape, (), step, "constant")
            else:
                tree = self.result(instr, ops, step)
            if async_start is not None and instr.is_root:
                wrapped_root[async_start.name] = tree
                for v in _leaves(tree):  # XLA starts an async result with its async-start
                    v.start = step + 1
            if (
                instr.opcode == "async-start"
                and instr.name in wrapped_root
                and isinstance(tree, tuple)
                and len(tree[1]) > 1
            ):
                tree[1][1] = wrapped_root[instr.name]  # the async result is the wrapped root
            if tree is not None:
                for v in _leaves(tree):  # a forwarded value is also read where it is forwarded
                    v.end = max(v.end, step)
            trees[instr.name] = tree
            record(tree)
            if instr.opcode in _CONTROL:
                inner = self.nested_peak(instr)
                if inner:
                    nested[step] = inner
        root = comp.root
        if root is not None:
            self.mark_outputs(trees.get(root.name), end, entry, io_alias)
        donated = set(io_alias.values()) if entry else set()
        params = {
            i.name: int(i.literal)
            for i in comp.instructions
            if i.opcode == "parameter" and (i.literal or "").isdigit()
        }
        for v in values:
            # a donated argument's buffer is free after its last read (XLA places temporaries
            # and the output written into it there); the others are the caller's to the end
            if entry and v.kind == "parameter" and params.get(v.instruction) not in donated:
                v.end = max(v.end, end)
        self.share_buffers(order, trees)
        if donated:
            self.hand_over_donated(values, params)
        return live

    @staticmethod
    def hand_over_donated(values: list[LiveValue], params: dict[str, int]) -> None:
        """An output written into a donated argument shares that argument's buffer: where the
        op that writes it is the argument's last reader (an in-place update), the two are one
        buffer at that step, counted once (in the output)."""
        by_number = {
            params[v.instruction]: v
            for v in values
            if v.kind == "parameter" and not v.index and v.instruction in params
        }
        for out in values:
            number = out.aliased_parameter
            arg = by_number.get(number) if number is not None and out.kind == "output" else None
            if arg is not None and arg.end >= out.start:
                held = arg.end if arg.counted_end is None else arg.counted_end
                arg.counted_end = min(held, out.start - 1)

    def can_share(self, user: Instruction, operand_index: int) -> bool:
        """XLA's ``CanShareOperandBufferWithUser`` for the common cases: an element-wise op, or
        a loop fusion whose parameter is only read element-wise."""
        if user.opcode in _ELEMENTWISE:
            return True
        if user.opcode != "fusion" or user.kind != "loop" or not user.called:
            return False
        comp = self.module.computations.get(user.called[0])
        if comp is None:
            return False
        param = next(
            (
                i
                for i in comp.instructions
                if i.opcode == "parameter" and (i.literal or "") == str(operand_index)
            ),
            None,
        )
        todo, seen = [param] if param is not None else [], set()
        users: dict[str, list[Instruction]] = {}
        for i in comp.instructions:
            for o in i.operands:
                users.setdefault(o, []).append(i)
        while todo:
            node = todo.pop()
            for u in users.get(node.name, []):
                if u.name in seen:
                    continue
                seen.add(u.name)
                if u.opcode not in _ELEMENTWISE and u.opcode != "tuple":
                    return False
                todo.append(u)
        return param is not None

    def share_buffers(
        self, order: list[tuple[Instruction, Instruction | None]], trees: dict[str, object]
    ) -> None:
        """Where XLA hands a dying operand's buffer to the result of the op that last reads it
        (same size, element-wise use), the two do not hold memory at that step together."""
        for step, (instr, _ctx) in enumerate(order):
            result = trees.get(instr.name)
            if isinstance(result, LiveValue):
                results = [result]
            elif isinstance(result, tuple) and instr.opcode == "fusion":
                # a multi-output fusion: each element may take a dying operand's buffer (seen
                # on XLA:GPU: an Adam update writing new moments over the gradients)
                results = [r for r in result[1] if isinstance(r, LiveValue)]
            else:
                continue
            for out in results:
                if out.start == step and out.kind in ("temporary", "output"):
                    self.share_one(instr, out, step, trees)

    def share_one(
        self, instr: Instruction, result: LiveValue, step: int, trees: dict[str, object]
    ) -> None:
        dims = _LAYOUT.sub("", result.shape)
        for k, name in enumerate(instr.operands):
            operand = trees.get(name)
            if (
                isinstance(operand, LiveValue)
                and operand.kind == "temporary"
                and operand.end == step
                and operand.counted_end is None
                and operand.bytes == result.bytes
                and operand.space == result.space
                and _LAYOUT.sub("", operand.shape) == dims
                and instr.operands.count(name) == 1
                and self.can_share(instr, k)
            ):
                operand.counted_end = step - 1
                return

    def mark_outputs(
        self,
        tree: object,
        end: int,
        entry: bool,
        io_alias: dict[tuple[int, ...], int],
        path: tuple[int, ...] = (),
    ) -> None:
        if tree is None:
            return
        if isinstance(tree, tuple):
            table, children = tree
            if table is not None:
                table.end = max(table.end, end)
                if entry and table.kind == "table":
                    table.kind = "output"
            for i, child in enumerate(children):
                self.mark_outputs(child, end, entry, io_alias, (*path, i))
            return
        tree.end = max(tree.end, end)
        if not entry:
            tree.kind = "body-output"
        elif tree.kind not in ("parameter", "constant"):
            tree.kind = "output"
            tree.aliased_parameter = io_alias.get(path)

    def nested_peak(self, instr: Instruction) -> list[LiveValue]:
        """Values live at the peak of the bodies ``instr`` runs (the largest of its bodies)."""
        best: list[LiveValue] = []
        best_bytes = -1
        for name in instr.called:
            comp = self.module.computations.get(name)
            if comp is None:
                continue
            body = self.run(comp, entry=False, io_alias={})
            for step_values in _peak_sets(body, space=0):
                total = sum(v.bytes for v in step_values)
                if total > best_bytes:
                    best, best_bytes = step_values, total
        return best


def _replace(tree: object, path: tuple[int, ...], new: object) -> object:
    if not path:
        return new
    if not isinstance(tree, tuple):
        return tree
    table, children = tree
    children = list(children)
    if path[0] < len(children):
        children[path[0]] = _replace(children[path[0]], path[1:], new)
    return (table, children)


def _peak_sets(body: Liveness, space: int) -> list[list[LiveValue]]:
    """The temporaries of a nested body live at its peak step (one candidate list)."""
    own = [v for v in body.values if v.kind in ("temporary", "table") and v.space == space]
    best: list[LiveValue] = []
    best_bytes = -1
    for step in range(len(body.steps)):
        live = [v for v in own if v.start <= step <= v.end] + body.nested.get(step, [])
        total = sum(v.bytes for v in live)
        if total > best_bytes:
            best, best_bytes = live, total
    return [best]


def liveness(module: HloModule, hlo_text: str = "", platform: str = "cpu") -> Liveness:
    """Live ranges of the ENTRY computation's values over XLA's schedule."""
    entry = module.entry_computation
    if entry is None:
        return Liveness("", [], [])
    builder = _Builder(module, platform)
    live = builder.run(entry, entry=True, io_alias=input_output_alias(hlo_text))
    if "is_scheduled=true" not in hlo_text[:2000] and hlo_text:
        live.notes.append("the module is not scheduled: the text order was used as the schedule")
    return live
