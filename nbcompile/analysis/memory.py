"""Where the bytes go: the memory map of a compiled program (pure: artifacts in, data out).

``memory_map_from_hlo(hlo_text, ...)`` follows XLA's schedule of the optimised module
(:mod:`.memory_live`) and answers: how many bytes are live at each step (``timeline``), the peak
(``peak_bytes``), which buffers are live at the peak (``at_peak``: bytes, shape, op, kind,
source lines, module) and what made them (``by_line``, ``by_module``, ``by_kind``). With a
capacity (device memory of the target) it says whether the program fits.

Two XLA figures are kept apart on purpose (both labelled ``XLA``):

* ``peak_bytes`` -- the largest sum of live buffers over the schedule, with XLA's own live
  ranges (every range equals XLA's ``*-live-range.txt`` dump, checked by the tests);
* ``allocated_bytes`` -- what the runtime allocates for one call: arguments + outputs +
  XLA's temporary block - donated (``memory_analysis()``). It is >= ``peak_bytes`` (XLA packs
  buffers into allocations with some waste) and it is what ``fits`` compares with capacity.

Kinds: ``parameter`` (arguments), ``output``, ``constant``, ``residual`` (made by the forward
pass and read by the backward pass of a gradient), ``temporary`` (everything else).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..capture.source import Location, SourceInfo
from ..units import format_bytes
from .compiled import op_name_phase
from .hlo import HloModule, Instruction, parse_hlo
from .lines import Locator
from .memory_live import Liveness, LiveValue, liveness
from .memory_loops import flatten_map

__all__ = ["MemoryBuffer", "MemoryMap", "locate", "memory_map_from_hlo"]

KINDS = ("parameter", "output", "constant", "residual", "temporary")
_PRIMITIVE = re.compile(r"([A-Za-z_][\w\-]*)(?:\[[^\]]*\])?$")
_LAYOUT = re.compile(r"\{[^{}]*\}")


def locate(
    locator: Locator, module: HloModule, instr: Instruction
) -> tuple[Location | None, int | None]:
    """The one place buffers get their source: ``(location, compiling-cell line)`` of an HLO
    instruction, in the form ``Fusion.locations`` / ``Fusion.source_lines`` use."""
    return locator.of_instruction(module, instr)


@dataclass
class MemoryBuffer:
    """One buffer (an XLA value) in the memory map."""

    name: str  # the HLO instruction that defines it, with the tuple index: ``fusion.3{}``
    bytes: int
    shape: str
    op: str  # the operation that computed it (JAX primitive where known, else HLO opcode)
    kind: str
    lines: list[Location]  # nearest user locations (cell or file), as in ``Fusion.locations``
    source_lines: list[int]  # visible lines of the compiled cell
    module: str | None  # model module path (``MLP/hidden``), None outside modules
    start: int
    end: int
    phase: str | None = None  # forward / backward / mixed in a gradient program
    instruction: str = ""  # the HLO instruction (a kernel name as in ``c.fusions``)
    argument: str | None = None  # for parameters: the argument path (``params['w1']``)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "bytes": self.bytes,
            "shape": self.shape,
            "op": self.op,
            "kind": self.kind,
            "lines": [loc.to_json() for loc in self.lines],
            "source_lines": list(self.source_lines),
            "module": self.module,
            "start": self.start,
            "end": self.end,
            "phase": self.phase,
            "instruction": self.instruction,
            "argument": self.argument,
            "source": "XLA",
        }


@dataclass
class MemoryMap:
    """The memory map of one compiled program on one device. See the module docstring."""

    peak_bytes: int
    peak_step: int
    timeline: list[tuple[int, int]]
    at_peak: list[MemoryBuffer]
    steps: list[dict[str, Any]]
    capacity_bytes: int | None = None
    capacity_source: str | None = None  # "measured" (the device says) | "spec" | None
    capacity_label: str | None = None  # what the capacity is of, and where it is written down
    allocated_bytes: int | None = None  # XLA: arguments + outputs + temporaries - donated
    generated_code_bytes: int | None = None
    xla: dict[str, Any] = field(default_factory=dict)  # memory_analysis(), normalised
    other_spaces: dict[int, int] = field(default_factory=dict)  # peak per non-default space
    peak_all_spaces: int | None = None  # largest live sum over every memory space (TPU: + VMEM)
    devices: int = 1
    program: str = "forward"  # "value_and_grad" when it describes the gradient program
    platform: str = "cpu"
    kind_timeline: dict[str, list[int]] = field(default_factory=dict)  # kind -> bytes per step
    peak_source: str = "XLA"  # "estimate" when loop bodies were summarised
    xla_live_range_peak: int | None = None  # the figure XLA's live-range dump prints
    notes: list[str] = field(default_factory=list)

    # --- derived figures ---------------------------------------------------------------------
    @property
    def required_bytes(self) -> int:
        """What must fit in device memory: XLA's allocation (+ code) where known, else the peak."""
        if self.allocated_bytes is None:
            return self.peak_bytes
        return self.allocated_bytes + (self.generated_code_bytes or 0)

    @property
    def required_source(self) -> str:
        return "XLA" if self.allocated_bytes is not None else "estimate"

    @property
    def fits(self) -> bool | None:
        """True / False against ``capacity_bytes``; None where the capacity is unknown."""
        if self.capacity_bytes is None:
            return None
        return self.required_bytes <= self.capacity_bytes

    @property
    def headroom_bytes(self) -> int | None:
        """Capacity left after the program's allocation (negative: that much too big)."""
        if self.capacity_bytes is None:
            return None
        return self.capacity_bytes - self.required_bytes

    @property
    def by_line(self) -> dict[Location, int]:
        """Bytes live at the peak per source location (a buffer with several locations is
        shared out evenly; buffers with none are left out)."""
        return _shares((b.lines, b.bytes) for b in self.at_peak)

    @property
    def by_cell_line(self) -> dict[int, int]:
        """Bytes live at the peak per visible line of the compiled cell."""
        return _shares((b.source_lines, b.bytes) for b in self.at_peak)

    @property
    def by_module(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for b in self.at_peak:
            if b.module:
                out[b.module] = out.get(b.module, 0) + b.bytes
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    @property
    def by_kind(self) -> dict[str, int]:
        out = dict.fromkeys(KINDS, 0)
        for b in self.at_peak:
            out[b.kind] = out.get(b.kind, 0) + b.bytes
        return out

    # --- output ------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """Every figure with its source: ``{"value": ..., "source": "XLA" | "spec" | ...}``."""

        def fig(value: Any, source: str | None) -> dict[str, Any]:
            return {"value": value, "source": source if value is not None else None}

        return {
            "peak_bytes": fig(self.peak_bytes, self.peak_source),
            "peak_step": self.peak_step,
            "allocated_bytes": fig(self.allocated_bytes, "XLA"),
            "generated_code_bytes": fig(self.generated_code_bytes, "XLA"),
            "required_bytes": fig(self.required_bytes, self.required_source),
            "capacity_bytes": fig(self.capacity_bytes, self.capacity_source),
            "capacity_label": self.capacity_label,
            "fits": fig(self.fits, self.capacity_source),
            "headroom_bytes": fig(self.headroom_bytes, self.capacity_source),
            "xla_live_range_peak": fig(self.xla_live_range_peak, "XLA"),
            "timeline": {
                "source": self.peak_source,
                "points": [list(p) for p in self.timeline],
                "steps": self.steps,
                "by_kind": self.kind_timeline,
            },
            "at_peak": [b.to_json() for b in self.at_peak],
            "by_line": [
                {**loc.to_json(), "bytes": v, "source": self.peak_source}
                for loc, v in self.by_line.items()
            ],
            "by_cell_line": {
                str(k): fig(v, self.peak_source) for k, v in self.by_cell_line.items()
            },
            "by_module": {k: fig(v, self.peak_source) for k, v in self.by_module.items()},
            "by_kind": {k: fig(v, self.peak_source) for k, v in self.by_kind.items()},
            "other_spaces": {str(k): fig(v, "XLA") for k, v in self.other_spaces.items()},
            "peak_all_spaces": fig(self.peak_all_spaces, self.peak_source),
            "xla": {k: fig(v, "XLA") for k, v in self.xla.items()},
            "devices": self.devices,
            "per_device": True,
            "program": self.program,
            "platform": self.platform,
            "notes": list(self.notes),
        }

    def text(self, top: int = 5) -> str:
        """A short plain-text summary: peak, allocation, fit verdict, what is live at the peak."""
        where = f" per device ({self.devices} devices)" if self.devices > 1 else ""
        what = "value_and_grad program" if self.program == "value_and_grad" else "program"
        lines = [
            f"memory of the {what}{where}: peak {format_bytes(self.peak_bytes)} live at "
            f"step {self.peak_step} of {len(self.steps)} ({self.peak_source})"
        ]
        if self.allocated_bytes is not None:
            code = (
                f" + code {format_bytes(self.generated_code_bytes)}"
                if self.generated_code_bytes
                else ""
            )
            lines.append(f"  XLA allocates {format_bytes(self.allocated_bytes)}{code} per call")
        if self.capacity_bytes is None:
            lines.append("  capacity unknown: fits not decided")
        else:
            verdict = "fits" if self.fits else "does NOT fit"
            lines.append(
                f"  {verdict} in {format_bytes(self.capacity_bytes)} "
                f"({self.capacity_bytes / 2**30:.4g} GiB) "
                f"[{self.capacity_source}: {self.capacity_label}]; headroom "
                f"{format_bytes(self.headroom_bytes)}"
            )
        kinds = ", ".join(f"{k} {format_bytes(v)}" for k, v in self.by_kind.items() if v)
        lines.append(f"  at the peak: {kinds}")
        for b in sorted(self.at_peak, key=lambda b: -b.bytes)[:top]:
            what = f"argument {b.argument}" if b.argument else b.op
            src = f" at {b.lines[0].label}" if b.lines else ""
            mod = f" [{b.module}]" if b.module else ""
            lines.append(
                f"    {format_bytes(b.bytes):>9}  {b.kind:<9} {what} "
                f"{_LAYOUT.sub('', b.shape)}{src}{mod}"
            )
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.text()


def _shares(items: Iterable[tuple[list, int]]) -> dict:
    out: dict = {}
    for keys, nbytes in items:
        keys = list(dict.fromkeys(keys))
        for key in keys:
            out[key] = out.get(key, 0) + nbytes // len(keys)
        if keys:  # integer shares: the remainder goes to the first key, so sums stay exact
            out[keys[0]] += nbytes - (nbytes // len(keys)) * len(keys)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


# --- building the map -------------------------------------------------------------------------
class _Where:
    """Source locations, visible cell lines, module path, op and phase of HLO instructions."""

    def __init__(self, module: HloModule, source: SourceInfo | None) -> None:
        self.module = module
        self.locator = Locator(source or SourceInfo())
        self.by_name = {
            c.name: {i.name: i for i in c.instructions} for c in module.computations.values()
        }
        self._phase: dict[str, str | None] = {}

    def instruction(self, computation: str, name: str) -> Instruction | None:
        return self.by_name.get(computation, {}).get(name)

    def producer(self, instr: Instruction, index: tuple[int, ...]) -> Instruction:
        """The op that computes the value: a fusion's root (the tuple element for multi-output
        fusions), followed into nested fusions."""
        for _ in range(16):
            if instr.opcode != "fusion" or not instr.called:
                return instr
            comp = self.module.computations.get(instr.called[0])
            root = comp.root if comp is not None else None
            if root is None:
                return instr
            if root.opcode == "tuple" and index and index[0] < len(root.operands):
                root = self.by_name[comp.name].get(root.operands[index[0]], root)
                index = index[1:]
            instr = root
        return instr

    def members(self, instr: Instruction) -> list[Instruction]:
        out, todo, seen = [], list(instr.called), set()
        while todo:
            comp = self.module.computations.get(todo.pop())
            if comp is None or comp.name in seen:
                continue
            seen.add(comp.name)
            out.extend(comp.instructions)
            todo.extend(c for i in comp.instructions for c in i.called)
        return out

    def lines(self, instrs: list[Instruction]) -> tuple[list[Location], list[int]]:
        locations: list[Location] = []
        visible: set[int] = set()
        for m in instrs:
            location, line = locate(self.locator, self.module, m)
            if location is not None:
                locations.append(location)
            if line is not None:
                visible.add(line)
        return list(dict.fromkeys(locations)), sorted(visible)

    def phase(self, instr: Instruction) -> str | None:
        key = f"{instr.computation}/{instr.name}"
        if key not in self._phase:
            found = {op_name_phase(m.op_name) for m in [instr, *self.members(instr)]} - {None}
            self._phase[key] = (
                "mixed" if "mixed" in found or len(found) > 1 else found.pop() if found else None
            )
        return self._phase[key]

    def buffer(self, v: LiveValue, kind: str) -> MemoryBuffer:
        from .compiled import _module_path

        instr = self.instruction(v.computation, v.instruction)
        if instr is None:
            return MemoryBuffer(v.label, v.bytes, v.shape, "?", kind, [], [], None, v.start, v.end)
        made_by = self.producer(instr, v.index)
        locations, visible = self.lines([made_by])
        if not locations and instr.opcode == "fusion":
            locations, visible = self.lines(self.members(instr))
        op = instr.opcode
        if made_by.op_name and instr.opcode != "parameter":
            m = _PRIMITIVE.search(made_by.op_name.split(";", 1)[0])
            op = m.group(1) if m else op
        elif made_by is not instr:
            op = made_by.opcode
        return MemoryBuffer(
            name=v.label,
            bytes=v.bytes,
            shape=v.shape,
            op=op,
            kind=kind,
            lines=locations,
            source_lines=visible,
            module=_module_path(made_by.op_name),
            start=v.start,
            end=v.end,
            phase=self.phase(instr),
            instruction=instr.name,
            argument=instr.op_name if instr.opcode == "parameter" else None,
        )


def _kind(v: LiveValue, where: _Where) -> str:
    if v.kind in ("parameter", "output", "constant"):
        return v.kind
    instr = where.instruction(v.computation, v.instruction)
    if instr is not None and where.phase(instr) == "forward":
        for user in v.users:
            u = where.instruction(v.computation, user)
            if u is not None and where.phase(u) in ("backward", "mixed"):
                return "residual"
    return "temporary"


def _xla_moment_total(values: list[LiveValue]) -> int:
    """The figure XLA's live-range dump prints: the live bytes at the moment its
    ``HloLiveRange::ComputePeakMemoryMoment`` picks (it sizes each value by its defining
    instruction's whole shape -- a tuple's pointer table for multi-output values -- and counts
    values ending at t-1 while adding those starting at t)."""
    events = sorted(
        [(v.start, 0, v.xla_moment_bytes) for v in values]
        + [(v.end + 1, 1, v.xla_moment_bytes) for v in values]
    )
    usage = peak = moment = 0
    for time, is_end, size in events:
        usage += -size if is_end else size
        if usage > peak:
            peak, moment = usage, time
    return sum(v.unpadded for v in values if v.start <= moment <= v.end)


def memory_map_from_hlo(
    hlo_text: str,
    *,
    module: HloModule | None = None,
    source: SourceInfo | None = None,
    platform: str = "cpu",
    xla_memory: dict[str, Any] | None = None,
    capacity: tuple[int | None, str | None, str | None] = (None, None, None),
    devices: int = 1,
    program: str = "forward",
) -> MemoryMap:
    """The :class:`MemoryMap` of an optimised, scheduled HLO module.

    ``source`` (a ``SourceInfo``) maps locations to visible cell lines; ``xla_memory`` is
    ``memory_analysis()`` normalised (``analysis.cost.normalise_memory``); ``capacity`` is
    ``(bytes, source, label)`` of the device's memory (``nbcompile.targets.device_capacity``).
    """
    module = module or parse_hlo(hlo_text)
    live: Liveness = liveness(module, hlo_text, platform)
    where = _Where(module, source)
    # an output written into a donated argument is its own value (XLA's live ranges): the
    # argument's buffer holds it from its definition, the argument before (see memory_live)
    counted = list(live.values)
    kinds = {id(v): _kind(v, where) for v in counted}
    for inner in live.nested.values():
        kinds.update({id(v): _kind(v, where) for v in inner})
    n = len(live.steps)
    per_kind = {k: [0] * n for k in KINDS}
    other: dict[int, list[int]] = {}
    for v in counted:
        rows = per_kind[kinds[id(v)] if kinds[id(v)] in per_kind else "temporary"]
        if v.space != 0:
            rows = other.setdefault(v.space, [0] * n)
        last = v.end if v.counted_end is None else v.counted_end
        for t in range(v.start, min(last, n - 1) + 1):
            rows[t] += v.bytes
    for t, inner in live.nested.items():
        for v in inner:
            (per_kind[kinds[id(v)]] if v.space == 0 else other.setdefault(v.space, [0] * n))[t] += (
                v.bytes
            )
    totals = [sum(per_kind[k][t] for k in KINDS) for t in range(n)]
    peak_step = max(range(n), key=lambda t: (totals[t], -t)) if n else 0
    peak = totals[peak_step] if n else 0
    at_peak = [
        v
        for v in counted
        if v.space == 0
        and v.start <= peak_step <= (v.end if v.counted_end is None else v.counted_end)
    ]
    at_peak += [v for v in live.nested.get(peak_step, []) if v.space == 0]
    buffers = sorted((where.buffer(v, kinds[id(v)]) for v in at_peak), key=lambda b: -b.bytes)
    steps = [{"name": i.name, "op": i.opcode, "phase": where.phase(i)} for i in live.steps]
    mem = dict(xla_memory or {})
    allocated = None
    if all(mem.get(k) is not None for k in ("argument_bytes", "output_bytes", "temp_bytes")):
        allocated = int(
            mem["argument_bytes"]
            + mem["output_bytes"]
            + mem["temp_bytes"]
            - (mem.get("alias_bytes") or 0)
        )
    notes = list(live.notes)
    if live.nested:
        notes.append(
            "loop/branch bodies are counted at their own peak at the step that runs "
            "them (XLA flattens them into the schedule): the peak is an estimate"
        )
    if platform == "cpu" and mem.get("peak_bytes") is not None:
        notes.append(
            "XLA:CPU's memory_analysis() peak counts arguments, outputs and constants "
            "only (its executable keeps no heap trace); the peak here follows XLA's "
            "live ranges"
        )
    cap_bytes, cap_source, cap_label = capacity
    m = MemoryMap(
        peak_bytes=peak,
        peak_step=peak_step,
        timeline=list(enumerate(totals)),
        at_peak=buffers,
        steps=steps,
        capacity_bytes=cap_bytes,
        capacity_source=cap_source,
        capacity_label=cap_label,
        allocated_bytes=allocated,
        generated_code_bytes=(
            int(mem["generated_code_bytes"]) if mem.get("generated_code_bytes") else None
        ),
        xla=mem,
        other_spaces={s: max(rows) for s, rows in sorted(other.items()) if rows},
        peak_all_spaces=max(
            (totals[t] + sum(rows[t] for rows in other.values()) for t in range(n)), default=0
        ),
        devices=devices,
        program=program,
        platform=platform,
        peak_source="estimate" if live.nested else "XLA",
        kind_timeline=per_kind,
        xla_live_range_peak=None if live.nested else _xla_moment_total(live.values),
        notes=notes,
    )
    # loops with a known trip count: every iteration its own steps (analysis/memory_loops.py)
    return flatten_map(m, module, live, platform, where) if live.nested else m
