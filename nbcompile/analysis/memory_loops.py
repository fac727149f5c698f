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

What does change from one iteration to the next is how much of a *stacked* buffer holds data
(``memory_stacks``): ``written`` / ``unread`` per step.

Bounded work. A long loop (10^5 iterations) would be 10^5 runs of its body, and nested loops
multiply: the flattened schedule keeps at most :data:`MAX_STEPS` steps. Past that every loop
runs out only its first ``K - 1`` iterations and its last, and the iterations between are
*folded* into one step that stands for them (``folded``: their range) holding the bytes of the
iteration's peak — exact, not an estimate, since every iteration holds the same bytes; only
``written`` / ``unread`` are then given at the folded range's last iteration. ``K`` is the same
for every loop, the largest that fits. Sums are kept per step (by kind), and a step's list of
live values is made only where asked (the peak): the values live across a loop are shared by
all its steps, not copied into each.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .hlo import HloModule, Instruction
from .memory_live import Liveness, LiveValue, _Builder
from .memory_stacks import Fill, ModuleIndex, fill_at, stack_slices

__all__ = ["MAX_STEPS", "FlatStep", "Flattened", "flatten", "flatten_map", "stack_slices"]

_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
#: flattened steps at most (about 150 bytes each in the report): past this, loops fold
MAX_STEPS = 10_000
#: loops named in the note at most
_NAMED = 8

Bucket = str | int  # a kind of value (memory space 0) or another memory space's number
Sums = dict[Bucket, int]


def _add(a: Sums, b: Sums) -> Sums:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


@dataclass
class _Outer:
    """Values live throughout a run of steps: this level's and, through ``parent``, those of
    the runs around it; ``sums``: all of their bytes per bucket."""

    values: list[LiveValue]
    parent: _Outer | None
    sums: Sums

    def all(self) -> list[LiveValue]:
        chain, at = [], self
        while at is not None:
            chain.append(at.values)
            at = at.parent
        return [v for values in reversed(chain) for v in values]


@dataclass
class _Body:
    """A computation's own values that count in its runs, and their bytes per bucket at each
    step (the same in every run: made once). ``nested``: the steps where a conditional's
    branch is added at its peak."""

    live: Liveness
    values: list[LiveValue]
    sums: dict[Bucket, list[int]]
    nested: dict[int, list[LiveValue]]

    def at(self, step: int) -> list[LiveValue]:
        here = [v for v in self.values if v.start <= step <= _last(v)]
        return here + self.nested.get(step, [])


@dataclass
class FlatStep:
    """One step of the flattened schedule: the instruction run, the loops it sits in (``(while
    name, iteration)``, outermost first) and the loops' stacked buffers: ``empty`` bytes of them
    hold no data that is still needed (not written yet, or read for the last time), ``written``
    bytes of output stacks are written, ``unread`` bytes of used-up input stacks are still to be
    read. ``folded``: the iterations of the innermost loop this one step stands for (their bytes
    are those of one iteration's peak step)."""

    instruction: Instruction
    outer: _Outer
    body: _Body | None = None
    step: int = 0
    loops: tuple[tuple[str, int], ...] = ()
    empty: int = 0
    written: int = 0
    unread: int = 0
    folded: tuple[int, int] | None = None

    @property
    def live(self) -> list[LiveValue]:
        """The values live at this step (made on request: it may be long)."""
        inner = self.body.at(self.step) if self.body is not None else []
        return self.outer.all() + inner

    def sums(self) -> Sums:
        if self.body is None:
            return self.outer.sums
        own = {b: rows[self.step] for b, rows in self.body.sums.items() if rows[self.step]}
        return _add(self.outer.sums, own)


@dataclass
class Flattened:
    steps: list[FlatStep] = field(default_factory=list)
    estimate: bool = False  # some body was still summarised at its peak
    whiles: dict[str, int] = field(default_factory=dict)  # while name -> trip count flattened
    #: while name -> (first, last) iteration folded into one step
    folded: dict[str, tuple[int, int]] = field(default_factory=dict)
    keep: int | None = None  # iterations run out per loop (the first keep - 1 and the last)


class _Flattener:
    def __init__(
        self, module: HloModule, builder: _Builder, bucket: Callable[[LiveValue], Bucket]
    ) -> None:
        self.module = module
        self.builder = builder
        self.bucket = bucket
        self.out = Flattened()
        self.keep: int | None = None  # None: every iteration
        self.bodies: dict[str, Liveness | None] = {}
        self.own: dict[tuple[int, Any], _Body] = {}
        self.across: dict[tuple[int, Any, int], tuple[list[LiveValue], Sums]] = {}
        self.peaks: dict[str, tuple[list[LiveValue], Sums]] = {}
        self.stacks: dict[str, list[tuple[int, str, int]]] = {}
        self.index: ModuleIndex | None = None

    # --- what each computation holds ------------------------------------------------------
    def body(self, name: str) -> Liveness | None:
        if name not in self.bodies:
            comp = self.module.computations.get(name)
            self.bodies[name] = (
                self.builder.run(comp, entry=False, io_alias={}) if comp is not None else None
            )
        return self.bodies[name]

    def sums(self, values: list[LiveValue]) -> Sums:
        out: Sums = {}
        for v in values:
            if v.aliased_parameter is None:
                b = self.bucket(v)
                out[b] = out.get(b, 0) + v.bytes
        return out

    def own_of(self, live: Liveness, kinds: tuple[str, ...] | None) -> _Body:
        """``live``'s own values of ``kinds`` (None: all) and their sums per step, by one sweep
        over their live ranges."""
        key = (id(live), kinds)
        if key in self.own:
            return self.own[key]
        values = [v for v in live.values if kinds is None or v.kind in kinds]
        n = len(live.steps)
        diff: dict[Bucket, list[int]] = {}
        for v in values:
            hi = min(_last(v), n - 1)
            if v.aliased_parameter is not None or v.start > hi:
                continue
            rows = diff.setdefault(self.bucket(v), [0] * (n + 1))
            rows[max(v.start, 0)] += v.bytes
            rows[hi + 1] -= v.bytes
        nested = {s: vs for s, vs in live.nested.items() if not _control(live.steps[s])}
        for step, inner in nested.items():
            for v in inner:
                if v.aliased_parameter is None:
                    rows = diff.setdefault(self.bucket(v), [0] * (n + 1))
                    rows[step] += v.bytes
                    rows[step + 1] -= v.bytes
        sums: dict[Bucket, list[int]] = {}
        for b, rows in diff.items():
            acc, out = 0, []
            for d in rows[:n]:
                acc += d
                out.append(acc)
            sums[b] = out
        self.own[key] = _Body(live, values, sums, nested)
        return self.own[key]

    def live_across(self, body: _Body, step: int) -> tuple[list[LiveValue], Sums]:
        """The values of ``body`` live across its control step ``step`` (made before it, read
        at or after it): they are live in every step the control op runs."""
        key = (id(body.live), id(body), step)
        if key not in self.across:
            values = [v for v in body.values if v.start < step <= _last(v)]
            self.across[key] = (values, self.sums(values))
        return self.across[key]

    def peak_of(self, name: str, body: Liveness | None) -> tuple[list[LiveValue], Sums]:
        if name not in self.peaks:
            values = _peak(body)
            self.peaks[name] = (values, self.sums(values))
        return self.peaks[name]

    # --- how many steps -------------------------------------------------------------------
    def size(self, live: Liveness, keep: int | None, memo: dict[int, int]) -> int:
        """Steps of one run of ``live`` when each loop runs out ``keep`` iterations (None:
        all of them)."""
        if id(live) in memo:
            return memo[id(live)]
        memo[id(live)] = 1  # a cycle (none in HLO) counts once
        n = 0
        for instr in live.steps:
            n += 1
            if not _control(instr):
                continue
            if instr.opcode == "call":
                n += sum(self.size(b, keep, memo) for c in instr.called if (b := self.body(c)))
                continue
            trips, body = _trips(instr), self.body(_body_name(instr))
            if trips is None or body is None:
                n += 1
                continue
            shown = trips if keep is None else min(trips, keep)
            n += shown * self.size(body, keep, memo) + (1 if shown < trips else 0)
        memo[id(live)] = n
        return n

    def choose_keep(self, live: Liveness) -> None:
        """The iterations each loop runs out: all where the whole schedule fits in
        :data:`MAX_STEPS`, else the largest ``keep`` that fits (at least 1)."""
        if self.size(live, None, {}) <= MAX_STEPS:
            return
        trips = [_trips(i) or 0 for c in self.module.computations.values() for i in c.instructions]
        lo, hi = 1, max([1, *trips])
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.size(live, mid, {}) <= MAX_STEPS:
                lo = mid
            else:
                hi = mid - 1
        self.keep = self.out.keep = lo

    # --- running ----------------------------------------------------------------------------
    def run(
        self,
        live: Liveness,
        outer: _Outer,
        kinds: tuple[str, ...] | None,
        loops: tuple[tuple[str, int], ...],
        fill: Fill,
    ) -> None:
        """Append the steps of ``live`` (with ``outer`` live throughout); ``kinds``: the kinds
        of its own values that count here (None: all: the entry computation)."""
        body = self.own_of(live, kinds)
        if body.nested:
            self.out.estimate = True  # a conditional's branches: at their peak
        for step, instr in enumerate(live.steps):
            if _control(instr):
                values, sums = self.live_across(body, step)
                across = _Outer(values, outer, _add(outer.sums, sums))
                self.control(instr, across, loops, fill)
            self.out.steps.append(FlatStep(instr, outer, body, step, loops, *fill))

    def control(
        self, instr: Instruction, outer: _Outer, loops: tuple[tuple[str, int], ...], fill: Fill
    ) -> None:
        kinds = ("temporary", "table")
        if instr.opcode == "call":
            for name in instr.called:
                body = self.body(name)
                if body is not None:
                    self.run(body, outer, kinds, loops, fill)
            return
        name = _body_name(instr)
        body, trips = self.body(name), _trips(instr)
        if trips is None or body is None:
            self.out.estimate = True  # not static: the body at its peak, once
            values, sums = self.peak_of(name, body)
            peak = _Outer(values, outer, _add(outer.sums, sums))
            self.out.steps.append(FlatStep(instr, peak, None, 0, loops, *fill))
            return
        self.out.whiles[instr.name] = trips
        if instr.name not in self.stacks:
            if self.index is None:
                self.index = ModuleIndex(self.module)
            self.stacks[instr.name] = stack_slices(self.module, instr, self.index)
        stacks = self.stacks[instr.name]
        keep = trips if self.keep is None else min(trips, self.keep)
        head, tail, folded = list(range(trips)), [], None
        if keep < trips:  # the first keep - 1 iterations, the folded ones, the last
            head = list(range(max(keep - 1, 1)))
            tail = [trips - 1] if keep > 1 else []
            folded = (len(head), trips - 1 - len(tail))
        first: tuple[int, int] | None = None
        for k in head:
            start = len(self.out.steps)
            self.run(body, outer, kinds, (*loops, (instr.name, k)), _plus(fill, fill_at(stacks, k)))
            first = first or (start, len(self.out.steps))
        if folded is not None:
            self.fold(instr, first, folded, loops, fill, stacks)
        for k in tail:
            self.run(body, outer, kinds, (*loops, (instr.name, k)), _plus(fill, fill_at(stacks, k)))

    def fold(
        self,
        instr: Instruction,
        like: tuple[int, int] | None,
        folded: tuple[int, int],
        loops: tuple[tuple[str, int], ...],
        fill: Fill,
        stacks: list[tuple[int, str, int]],
    ) -> None:
        """One step standing for iterations ``folded`` of loop ``instr``: the bytes of the peak
        step of an iteration run out (``like``: its steps), which every iteration repeats."""
        a, b = folded
        if like is None or a > b:
            return
        lo, hi = like
        best = max(range(lo, hi), key=lambda t: (_total(self.out.steps[t]), -t), default=None)
        if best is None:
            return
        rep = self.out.steps[best]
        self.out.folded[instr.name] = (a, b)
        loops_here = (*loops, (instr.name, a))
        step = FlatStep(rep.instruction, rep.outer, rep.body, rep.step, loops_here)
        step.empty, step.written, step.unread = _plus(fill, fill_at(stacks, b))
        step.folded = (a, b)
        self.out.steps.append(step)


def _control(instr: Instruction) -> bool:
    return instr.opcode in ("while", "call") and bool(instr.called)


def _body_name(instr: Instruction) -> str:
    return instr.attrs.get("body", "").lstrip("%")


def _trips(instr: Instruction) -> int | None:
    if instr.opcode != "while":
        return None
    trip = _TRIP.search(instr.tail)
    return int(trip.group(1)) if trip is not None else None


def _plus(a: Fill, b: Fill) -> Fill:
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2])


def _total(step: FlatStep) -> int:
    return sum(v for b, v in step.sums().items() if isinstance(b, str))


def _last(v: LiveValue) -> int:
    return v.end if v.counted_end is None else v.counted_end


def _peak(body: Liveness | None) -> list[LiveValue]:
    """The body's own values live at its peak step (one sweep over their ranges)."""
    if body is None:
        return []
    own = [v for v in body.values if v.kind in ("temporary", "table") and v.space == 0]
    n = len(body.steps)
    if not n:
        return []
    diff = [0] * (n + 1)
    for v in own:
        hi = min(_last(v), n - 1)
        if v.start <= hi:
            diff[max(v.start, 0)] += v.bytes
            diff[hi + 1] -= v.bytes
    best_step, best, acc = 0, -1, 0
    for step in range(n):
        acc += diff[step]
        total = acc + sum(v.bytes for v in body.nested.get(step, []))
        if total > best:
            best_step, best = step, total
    return [v for v in own if v.start <= best_step <= _last(v)] + body.nested.get(best_step, [])


def flatten(
    module: HloModule,
    live: Liveness,
    platform: str = "cpu",
    kind_of: Callable[[LiveValue], str] | None = None,
) -> Flattened:
    """The entry computation's schedule with every loop of known trip count run out (folded
    past :data:`MAX_STEPS`); ``kind_of`` sorts values into kinds (default: their own)."""
    kinds: dict[int, Bucket] = {}

    def bucket(v: LiveValue) -> Bucket:
        if v.space != 0:
            return v.space
        if id(v) not in kinds:
            kinds[id(v)] = kind_of(v) if kind_of is not None else v.kind
        return kinds[id(v)]

    f = _Flattener(module, _Builder(module, platform), bucket)
    f.choose_keep(live)
    f.run(live, _Outer([], None, {}), None, (), (0, 0, 0))
    return f.out


def flatten_map(m: Any, module: HloModule, live: Liveness, platform: str, where: Any) -> Any:
    """``m`` (a ``MemoryMap`` whose loop bodies were summarised at their peaks) with its
    timeline, peak and buffers at the peak read from the flattened schedule instead, where
    any loop has a known trip count. Each step of a loop says which (``while``, ``iteration``)
    and the bytes of its stacked buffers ``written`` / still ``unread``; a folded step the
    iterations it stands for (``folded``)."""
    from .memory import KINDS, _kind

    flat = flatten(module, live, platform, lambda v: _kind(v, where))
    if not flat.whiles:
        return m
    n = len(flat.steps)
    per_kind = {k: [0] * n for k in KINDS}
    other: dict[int, list[int]] = {}
    for t, step in enumerate(flat.steps):
        for b, nbytes in step.sums().items():
            if isinstance(b, int):
                if b not in other:  # not setdefault: its default, n ints, is made every time
                    other[b] = [0] * n
                other[b][t] += nbytes
            else:
                per_kind[b if b in per_kind else "temporary"][t] += nbytes
    totals = [sum(per_kind[k][t] for k in KINDS) for t in range(n)]
    peak_step = max(range(n), key=lambda t: (totals[t], -t))
    at_peak = [
        v for v in flat.steps[peak_step].live if v.space == 0 and v.aliased_parameter is None
    ]
    m.at_peak = sorted((where.buffer(v, _kind(v, where)) for v in at_peak), key=lambda b: -b.bytes)
    m.steps = [_step_json(s, where) for s in flat.steps]
    m.timeline = list(enumerate(totals))
    m.kind_timeline = per_kind
    m.peak_bytes, m.peak_step = totals[peak_step], peak_step
    m.other_spaces = {s: max(rows) for s, rows in sorted(other.items()) if rows}
    m.peak_all_spaces = max(totals[t] + sum(r[t] for r in other.values()) for t in range(n))
    m.peak_source = "estimate" if flat.estimate else "XLA"
    m.notes = [x for x in m.notes if not x.startswith("loop/branch bodies are counted")]
    m.notes.append(_note(flat))
    return m


def _note(flat: Flattened) -> str:
    named = list(flat.whiles.items())
    trips = ", ".join(f"{w} × {k:,}" for w, k in named[:_NAMED])
    if len(named) > _NAMED:
        trips += f" and {len(named) - _NAMED} more loops"
    text = (
        f"loops run out iteration by iteration ({trips}): each iteration's steps hold the "
        "values live across the loop and its body's own; a scan's stacked buffers are "
        "allocated whole before its loop (steps[*].written / .unread: how much of them holds "
        "data)"
    )
    if flat.folded:
        keep = flat.keep or 1
        shown = (
            "its first iteration"
            if keep == 1
            else f"its first {keep - 1} iteration{'s' if keep > 2 else ''} and its last"
        )
        folds = ", ".join(f"{w} {a:,}–{b:,}" for w, (a, b) in list(flat.folded.items())[:_NAMED])
        if len(flat.folded) > _NAMED:
            folds += f" and {len(flat.folded) - _NAMED} more"
        text += (
            f"; over {MAX_STEPS:,} steps, so each loop runs out {shown}, and the iterations "
            f"between are one step each ({folds}: steps[*].folded) holding the bytes of an "
            "iteration's peak, which every iteration repeats: the peak is exact"
        )
    if flat.estimate:
        text += (
            "; a branch or a loop without a known trip count is still counted at its peak: "
            "the peak is an estimate"
        )
    return text


def _step_json(step: FlatStep, where: Any) -> dict[str, Any]:
    instr = step.instruction
    out: dict[str, Any] = {"name": instr.name, "op": instr.opcode, "phase": where.phase(instr)}
    if step.loops:
        out["loop"], out["iteration"] = step.loops[-1]
        out["written"], out["unread"] = step.written, step.unread
    if step.folded is not None:
        out["folded"] = list(step.folded)
    return out
