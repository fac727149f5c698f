"""The memory timeline flattened through loops: every iteration of a loop with a static trip
count is its own run of steps (pure: the module and its entry liveness in, steps out).

XLA runs a ``while`` body once per iteration on the loop state it allocated before the loop
(``memory_live``: the state is updated in place). So at each step of iteration k the live bytes
are the values live across the ``while`` step of the enclosing computation (its operands, which
die with it, included; its results, made by it, not yet) plus the body's own temporaries live at
that body step — the same in every iteration, as XLA's ``HloLiveRange`` flattens a body into the
schedule once (just before the ``while``). A ``call`` (XLA:CPU wraps loops in "small calls") is
flattened the same way, once; a ``conditional`` keeps its largest branch's peak, and a loop
without a known trip count (``known_trip_count`` in its backend config) its body's peak: then
the peak is still an estimate.

What does change from one iteration to the next is how much of a *stacked* buffer holds data: a
scan writes slice k of each stacked output (``dynamic-update-slice`` at the loop counter) and
reads slice k of each stacked input. ``filled`` says, per step, how many bytes of the loop's
stacked buffers hold data that is still needed: an output stack fills one slice per iteration
(the residuals of a scan's forward pass), an input stack that dies with the loop empties one
slice per iteration (those residuals, read by the backward scan); XLA's allocation stays whole
(the ``timeline`` totals).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .hlo import HloModule, Instruction
from .memory_live import Liveness, LiveValue, _Builder
from .memory_sizes import array_bytes, split_tuple

__all__ = ["FlatStep", "Flattened", "flatten", "flatten_map"]

_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
#: flattened steps at most: past this the timeline keeps loop bodies summarised
MAX_STEPS = 50_000


@dataclass
class FlatStep:
    """One step of the flattened schedule: the instruction run, the values live at it, the
    loops it sits in (``(while name, iteration)``, outermost first) and the loops' stacked
    buffers: ``empty`` bytes of them hold no data that is still needed (not written yet, or
    read for the last time), ``written`` bytes of output stacks are written, ``unread`` bytes
    of used-up input stacks are still to be read."""

    instruction: Instruction
    live: list[LiveValue]
    loops: tuple[tuple[str, int], ...] = ()
    empty: int = 0
    written: int = 0
    unread: int = 0


Fill = tuple[int, int, int]  # (empty, written, unread) of the loops around a step


@dataclass
class Flattened:
    steps: list[FlatStep] = field(default_factory=list)
    estimate: bool = False  # some body was still summarised at its peak
    whiles: dict[str, int] = field(default_factory=dict)  # while name -> trip count flattened


class _Flattener:
    def __init__(self, module: HloModule, builder: _Builder) -> None:
        self.module = module
        self.builder = builder
        self.out = Flattened()
        self.bodies: dict[str, Liveness | None] = {}
        self.stacks: dict[str, list[tuple[int, str, int]]] = {}

    def body(self, name: str) -> Liveness | None:
        if name not in self.bodies:
            comp = self.module.computations.get(name)
            self.bodies[name] = (
                self.builder.run(comp, entry=False, io_alias={}) if comp is not None else None
            )
        return self.bodies[name]

    def run(
        self,
        live: Liveness,
        outer: list[LiveValue],
        own_kinds: tuple[str, ...] | None,
        loops: tuple[tuple[str, int], ...],
        fill: Fill,
    ) -> None:
        """Append the steps of ``live`` (with ``outer`` live throughout); ``own_kinds``: the
        kinds of its values that count here (None: all: the entry computation)."""
        own = [v for v in live.values if own_kinds is None or v.kind in own_kinds]
        for step, instr in enumerate(live.steps):
            here = [v for v in own if v.start <= step <= _last(v)]
            if instr.opcode in ("while", "call") and instr.called:
                self.control(instr, [*outer, *(v for v in here if v.start < step)], loops, fill)
            elif step in live.nested:
                self.out.estimate = True  # a conditional's branches: at their peak
                here = here + live.nested[step]
            self.out.steps.append(FlatStep(instr, [*outer, *here], loops, *fill))

    def control(
        self,
        instr: Instruction,
        outer: list[LiveValue],
        loops: tuple[tuple[str, int], ...],
        fill: Fill,
    ) -> None:
        kinds = ("temporary", "table")
        if instr.opcode == "call":
            for name in instr.called:
                body = self.body(name)
                if body is not None:
                    self.run(body, outer, kinds, loops, fill)
            return
        trip = _TRIP.search(instr.tail)
        body = self.body(instr.attrs.get("body", "").lstrip("%"))
        trips = int(trip.group(1)) if trip is not None else 0
        size = len(body.steps) * trips if body is not None else 0
        if trip is None or body is None or len(self.out.steps) + size > MAX_STEPS:
            self.out.estimate = True  # not static (or too long): the body at its peak, once
            self.out.steps.append(FlatStep(instr, [*outer, *_peak(body)], loops, *fill))
            return
        self.out.whiles[instr.name] = trips
        if instr.name not in self.stacks:
            self.stacks[instr.name] = stack_slices(self.module, instr)
        for k in range(trips):
            more = _fill(self.stacks[instr.name], k)
            inner = (fill[0] + more[0], fill[1] + more[1], fill[2] + more[2])
            self.run(body, outer, kinds, (*loops, (instr.name, k)), inner)


def _last(v: LiveValue) -> int:
    return v.end if v.counted_end is None else v.counted_end


def _peak(body: Liveness | None) -> list[LiveValue]:
    if body is None:
        return []
    own = [v for v in body.values if v.kind in ("temporary", "table") and v.space == 0]
    best: list[LiveValue] = []
    for step in range(len(body.steps)):
        live = [v for v in own if v.start <= step <= _last(v)] + body.nested.get(step, [])
        if sum(v.bytes for v in live) > sum(v.bytes for v in best):
            best = live
    return best


def stack_slices(module: HloModule, loop: Instruction) -> list[tuple[int, str, int]]:
    """The stacked buffers of a ``while``: ``(bytes, "write" | "read", slices)`` for each
    loop-state element its body writes one slice of (an in-place ``dynamic-update-slice``) per
    iteration, or reads one slice of (a ``dynamic-slice``) and nothing after the loop reads
    (its data is used up slice by slice); its leading dimension is the slices."""
    comp = module.computations.get(loop.attrs.get("body", "").lstrip("%"))
    if comp is None:
        return []
    by_name = {i.name: i for i in comp.instructions}
    element: dict[str, tuple[int, str]] = {}  # a loop-state element -> (index, shape)
    params = [i for i in comp.instructions if i.opcode == "parameter"]
    for i in comp.instructions:
        src = by_name.get(i.operands[0]) if i.operands else None
        if i.opcode == "get-tuple-element" and src is not None and src.opcode == "parameter":
            element[i.name] = (int(i.attrs.get("index", "0")), i.shape)
    for p in params:  # jaxlib 0.12 prints an element of a tuple operand as ``%param#3``
        for k, shape in enumerate(split_tuple(p.shape) or []):
            element[f"{p.name}#{k}"] = (k, shape)
    out: dict[int, tuple[int, str, int]] = {}
    for i in comp.instructions:
        for k, operand in enumerate(i.operands):
            name = _through_bitcasts(by_name, operand)
            if name not in element:
                continue
            how = _slice_use(module, i, k)
            if how is None:
                continue
            index, shape = element[name]
            dims = re.findall(r"\[([\d,]*)\]", shape)
            lead = int(dims[0].split(",")[0]) if dims and dims[0] else 0
            used_up = (
                how == "read"
                and _origin(module, loop, index) == "while"
                and not _read_after(module, loop, index)
            )
            if lead > 1 and (how == "write" or used_up):
                out.setdefault(index, (array_bytes(shape), how, lead))
    return list(out.values())


_PASS = ("bitcast", "copy", "get-tuple-element", "tuple")


def _origin(module: HloModule, loop: Instruction, index: int) -> str:
    """What made the data of element ``index`` of the loop's initial state: ``"while"`` (an
    earlier loop wrote it: a scan's stacked residuals), ``"parameter"`` (an argument) or
    ``"other"``, followed through copies, tuples and the calls XLA:CPU wraps loops in."""
    comps = module.computations
    by_comp = {c.name: {i.name: i for i in c.instructions} for c in comps.values()}
    comp, name, path = loop.computation, (loop.operands or [""])[0], [index]
    for _ in range(32):
        base, _, element = name.partition("#")
        if element:  # ``%x#3``: element 3 of x (jaxlib 0.12's printing)
            name, path = base, [int(element), *path]
            continue
        instr = by_comp.get(comp, {}).get(name)
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
            if comp == module.entry:
                return "parameter"
            caller = next(
                (
                    i
                    for c in comps.values()
                    for i in c.instructions
                    if i.opcode == "call" and comp in i.called
                ),
                None,
            )
            k = int(instr.literal) if (instr.literal or "").isdigit() else 0
            if caller is None or k >= len(caller.operands):
                return "other"
            comp, name = caller.computation, caller.operands[k]
        else:
            return "other"
    return "other"


def _read_after(module: HloModule, loop: Instruction, index: int) -> bool:
    """Whether element ``index`` of the loop's result is read after it (through the "small
    call" XLA:CPU wraps a loop in, where the loop is that call's result)."""
    node, comp_name = loop, loop.computation
    for _ in range(4):
        comp = module.computations.get(comp_name)
        if comp is None:
            return True
        for i in comp.instructions:
            if f"{node.name}#{index}" in i.operands or (
                node.name in i.operands
                and (i.opcode != "get-tuple-element" or i.attrs.get("index") == str(index))
            ):
                return True
        if comp.root is not node:
            return False
        caller = next(
            (
                i
                for c in module.computations.values()
                for i in c.instructions
                if i.opcode == "call" and comp_name in i.called
            ),
            None,
        )
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


def _fill(stacks: list[tuple[int, str, int]], k: int) -> Fill:
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


def flatten(module: HloModule, live: Liveness, platform: str = "cpu") -> Flattened:
    """The entry computation's schedule with every loop of known trip count run out."""
    f = _Flattener(module, _Builder(module, platform))
    f.run(live, [], None, (), (0, 0, 0))
    return f.out


def flatten_map(m: Any, module: HloModule, live: Liveness, platform: str, where: Any) -> Any:
    """``m`` (a ``MemoryMap`` whose loop bodies were summarised at their peaks) with its
    timeline, peak and buffers at the peak read from the flattened schedule instead, where
    any loop has a known trip count. Each step of a loop says which (``while``, ``iteration``)
    and the bytes of its stacked buffers ``written`` / still ``unread``."""
    from .memory import KINDS, _kind

    flat = flatten(module, live, platform)
    if not flat.whiles:
        return m
    kinds: dict[int, str] = {}
    n = len(flat.steps)
    per_kind = {k: [0] * n for k in KINDS}
    other: dict[int, list[int]] = {}
    for t, step in enumerate(flat.steps):
        for v in step.live:
            if v.aliased_parameter is not None:
                continue
            kind = kinds.get(id(v))
            if kind is None:
                kind = kinds[id(v)] = _kind(v, where)
            if v.space != 0:
                other.setdefault(v.space, [0] * n)[t] += v.bytes
            else:
                per_kind[kind if kind in per_kind else "temporary"][t] += v.bytes
    totals = [sum(per_kind[k][t] for k in KINDS) for t in range(n)]
    peak_step = max(range(n), key=lambda t: (totals[t], -t))
    at_peak = [
        v for v in flat.steps[peak_step].live if v.space == 0 and v.aliased_parameter is None
    ]
    m.at_peak = sorted((where.buffer(v, kinds[id(v)]) for v in at_peak), key=lambda b: -b.bytes)
    m.steps = [_step_json(s, where) for s in flat.steps]
    m.timeline = list(enumerate(totals))
    m.kind_timeline = per_kind
    m.peak_bytes, m.peak_step = totals[peak_step], peak_step
    m.other_spaces = {s: max(rows) for s, rows in sorted(other.items()) if rows}
    m.peak_all_spaces = max(totals[t] + sum(r[t] for r in other.values()) for t in range(n))
    m.peak_source = "estimate" if flat.estimate else "XLA"
    m.notes = [x for x in m.notes if not x.startswith("loop/branch bodies are counted")]
    trips = ", ".join(f"{w} × {k}" for w, k in flat.whiles.items())
    m.notes.append(
        f"loops run out iteration by iteration ({trips}): each iteration's steps hold the "
        "values live across the loop and its body's own; a scan's stacked buffers are "
        "allocated whole before its loop (steps[*].written / .unread: how much of them holds "
        "data)"
        + (
            "; a branch or a loop without a known trip count is still counted at its peak: "
            "the peak is an estimate"
            if flat.estimate
            else ""
        )
    )
    return m


def _step_json(step: FlatStep, where: Any) -> dict[str, Any]:
    instr = step.instruction
    out: dict[str, Any] = {"name": instr.name, "op": instr.opcode, "phase": where.phase(instr)}
    if step.loops:
        out["loop"], out["iteration"] = step.loops[-1]
        out["written"], out["unread"] = step.written, step.unread
    return out
