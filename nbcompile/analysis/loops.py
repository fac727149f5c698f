"""The program's loops: every ``lax.scan`` / ``fori_loop`` / ``while_loop`` / ``lax.map`` of the
traced program, matched to the ``while`` loops XLA kept after optimisation (``c.loops``).

JAX lowers each loop to one HLO ``while`` (``unroll=k``: a body of k copies running
``length // k`` times); XLA may then unroll it (no ``while`` left), hoist loop-invariant kernels
out of it or fuse its body. A traced loop and an XLA ``while`` are matched by the user's line
that started the loop (the ``while``'s metadata keeps it), then by the user's call path and
forward/backward phase, then in order. Everything XLA did that the traced loop does not show is
said in :attr:`Loop.changes`.

The kind is the function the user called (``lax.fori_loop`` with static bounds is a ``scan``
equation, but the user wrote a ``fori_loop``): read from the equation's traceback
(``_jax.loop_api``).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..capture.source import Location
from . import _jax
from .calls import CallKinds, op_name_calls
from .compiled import CONTROL_OPS, CompiledInfo, op_name_phase
from .graph import Graph
from .hlo import HloModule, Instruction
from .lines import Locator
from .traced import Traced, _subprograms

__all__ = ["Loop", "find_loops"]

_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
# XLA:CPU (jaxlib 0.12) compiles a ``call`` marked so into one kernel, loops and all: the
# profiler then sees that call and none of the loop's iterations
_SMALL_CALL = 'xla_cpu_small_call="true"'
_KINDS = {"scan": "scan", "fori_loop": "fori_loop", "while_loop": "while_loop", "map": "map"}


@dataclass
class Loop:
    """One loop of the program. ``trip_count``: iterations per run (from the traced program,
    else XLA's known trip count; None when not static); ``body_kernels``: the XLA kernels one
    iteration runs (its nested loops' included); ``nested``: the loops inside it;
    ``whiles``: the XLA ``while`` instructions it became (empty when XLA unrolled it);
    ``changes``: what JAX's lowering or XLA did to it, in words."""

    index: int
    kind: str
    line: int | None
    location: Location | None
    group: str | None
    trip_count: int | None
    body_kernels: list[str] = field(default_factory=list)
    nested: list[Loop] = field(default_factory=list)
    #: the kernels of the body itself (not of a branch or an inner loop): each runs once in
    #: every iteration, which is how a profile tells iterations apart
    every_iteration: list[str] = field(default_factory=list)
    #: the kernel XLA compiled the whole loop into (XLA:CPU's "small call"), else None: no
    #: iteration of it is seen by a profiler
    one_kernel: str | None = None
    phase: str | None = None
    reverse: bool = False
    unroll: int = 1
    whiles: list[str] = field(default_factory=list)
    xla_trip_count: int | None = None
    trip_count_from: str | None = None  # "traced" | "XLA" | None
    changes: list[str] = field(default_factory=list)
    node: str | None = None  # the loop's node in the traced graph
    body_group: str | None = None  # its body's group in the traced graph
    compiled_groups: list[str] = field(default_factory=list)  # its body in the compiled graph
    parent: int | None = None  # index of the loop it sits in

    @property
    def label(self) -> str:
        """``scan × 6 · line 6`` (``?`` for a trip count that is not static)."""
        trips = self.trip_count if self.trip_count is not None else "?"
        where = (
            f"line {self.line}"
            if self.line is not None
            else (self.location.label if self.location is not None else "no line")
        )
        back = " (backward)" if self.phase == "backward" else ""
        return f"{self.kind} × {trips} · {where}{back}"

    @property
    def unrolled(self) -> bool:
        """True where no ``while`` is left of it in XLA's program."""
        return not self.whiles

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "kind": self.kind,
            "label": self.label,
            "line": self.line,
            "location": self.location.to_json() if self.location is not None else None,
            "group": self.group,
            "trip_count": self.trip_count,
            "xla_trip_count": self.xla_trip_count,
            "phase": self.phase,
            "reverse": self.reverse,
            "unroll": self.unroll,
            "body_kernels": list(self.body_kernels),
            "every_iteration": list(self.every_iteration),
            "nested": [n.index for n in self.nested],
            "parent": self.parent,
            "whiles": list(self.whiles),
            "one_kernel": self.one_kernel,
            "changes": list(self.changes),
            "node": self.node,
            "body_group": self.body_group,
            "compiled_groups": list(self.compiled_groups),
            "from": {"trip_count": self.trip_count_from or "none", "body_kernels": "XLA"},
        }

    def __repr__(self) -> str:
        return f"Loop({self.label}, {len(self.body_kernels)} kernels, {len(self.nested)} nested)"


# --- the traced side -----------------------------------------------------------------------
@dataclass
class _Traced:
    loop: Loop
    body_locations: Counter = field(default_factory=Counter)  # location -> equations in body
    calls: str | None = None


def _inner(sub: Any) -> Any:
    return sub.jaxpr if isinstance(sub, _jax.ClosedJaxpr) else sub


def _call_group(calls: str | None, kinds: CallKinds) -> str | None:
    """The user's call group a loop sits in: its equation's call path without the library
    calls that made it (``outer#1/fori_loop`` -> ``outer#1``)."""
    labels = calls.split("/") if calls else []
    while labels and kinds.get(labels[-1]) == "library":
        labels.pop()
    return "/".join(labels) or None


def _traced_loops(
    closed_jaxpr: Any, traced: Traced, kinds: CallKinds
) -> tuple[list[_Traced], Counter]:
    """Every loop equation in walk order, and how many equations each location has."""
    graph: Graph = traced.graph
    found: list[_Traced] = []
    total: Counter = Counter()

    def visit(jaxpr: Any, parent: _Traced | None, around: list[_Traced]) -> None:
        for eqn in jaxpr.eqns:
            node = graph.node(graph.eqn_nodes.get(id(eqn), ""))
            loc = node.location if node is not None else None
            if loc is not None:
                total[loc] += 1
                for t in around:
                    t.body_locations[loc] += 1
            prim = eqn.primitive.name
            subs = _subprograms(eqn)
            if prim not in ("scan", "while") or not subs:
                for _label, sub, _bind in subs:
                    visit(_inner(sub), parent, around)
                continue
            t = _new_loop(len(found), eqn, node, parent, kinds)
            found.append(t)
            if parent is not None:
                parent.loop.nested.append(t.loop)
            for _label, sub, _bind in subs:
                visit(_inner(sub), t, [*around, t])

    visit(_inner(closed_jaxpr), None, [])
    return found, total


def _new_loop(index: int, eqn: Any, node: Any, parent: _Traced | None, kinds: CallKinds) -> _Traced:
    prim, params = eqn.primitive.name, eqn.params
    api = _jax.loop_api(eqn.source_info.traceback)
    kind = _KINDS.get(api or "", "scan" if prim == "scan" else "while_loop")
    length, reverse, unroll = _jax.scan_params(params) if prim == "scan" else (None, False, 1)
    calls = node.extra.get("calls") if node is not None else None
    loop = Loop(
        index=index,
        kind=kind,
        line=node.line if node is not None else None,
        location=node.location if node is not None else None,
        group=_call_group(calls, kinds),
        trip_count=length,
        trip_count_from="traced" if length is not None else None,
        phase=node.phase if node is not None else None,
        reverse=reverse,
        unroll=unroll,
        node=node.id if node is not None else None,
        body_group=(node.extra.get("loop_body") if node is not None else None),
        parent=parent.loop.index if parent is not None else None,
    )
    return _Traced(loop, calls=calls)


# --- the XLA side --------------------------------------------------------------------------
@dataclass
class _While:
    instr: Instruction
    order: int
    location: Location | None
    line: int | None
    calls: str | None
    backward: bool
    trip: int | None
    parent: _While | None
    computations: set[str] = field(default_factory=set)  # body + condition, transitively
    small_call: str | None = None  # the ``call`` XLA:CPU compiles, loop and all, as one kernel

    @property
    def body(self) -> str | None:
        return self.instr.attrs.get("body", "").lstrip("%") or None


def _xla_whiles(module: HloModule, locator: Locator, kinds: CallKinds) -> list[_While]:
    """Every ``while`` of the non-fused computations, outer loops first, in program order."""
    out: list[_While] = []
    seen: set[str] = set()

    def visit(comp_name: str, owner: _While | None, small: str | None) -> None:
        comp = module.computations.get(comp_name)
        if comp is None or comp_name in seen:
            return
        seen.add(comp_name)
        for instr in comp.instructions:
            if instr.opcode not in CONTROL_OPS:
                continue
            if instr.opcode != "while":
                inner = small
                if instr.opcode == "call" and small is None and _SMALL_CALL in instr.tail:
                    inner = instr.name
                for called in instr.called:
                    _add(owner, called)
                    visit(called, owner, inner)
                continue
            location, line = locator.of_instruction(module, instr)
            trip = _TRIP.search(instr.tail)
            w = _While(
                instr,
                len(out),
                location,
                line,
                op_name_calls(instr.op_name, kinds),
                op_name_phase(instr.op_name) == "backward",
                int(trip.group(1)) if trip else None,
                owner,
                small_call=small,
            )
            out.append(w)
            for called in instr.called:
                _add(w, called)
                visit(called, w, small)

    def _add(w: _While | None, comp: str) -> None:
        while w is not None:  # an inner loop's computations run in every outer iteration
            w.computations.add(comp)
            w = w.parent

    if module.entry:
        visit(module.entry, None, None)
    return out


# --- matching ------------------------------------------------------------------------------
def _match(loops: list[_Traced], whiles: list[_While]) -> dict[int, list[_While]]:
    """Loop index -> the XLA ``while``s it became: same line first, then the same call path,
    phase and enclosing loop, then in order; a ``while`` left over at a matched loop's line
    (a remainder loop, a copy XLA made) joins that loop."""
    taken: dict[int, list[_While]] = {}
    owner: dict[int, int] = {}  # id(while instr) -> loop index
    free = list(whiles)
    for t in loops:
        loop = t.loop
        best, best_score = None, -1
        for w in free:
            if loop.location is None or w.location != loop.location:
                continue
            parent_ok = (
                w.parent is None
                if loop.parent is None
                else w.parent is not None and owner.get(id(w.parent.instr)) == loop.parent
            )
            score = (
                4 * (w.backward == (loop.phase == "backward"))
                + 2 * (w.calls == t.calls)
                + parent_ok
            )
            if score > best_score:
                best, best_score = w, score
        if best is not None:
            free.remove(best)
            taken[loop.index] = [best]
            owner[id(best.instr)] = loop.index
    for w in free:
        for t in loops:
            hit = taken.get(t.loop.index)
            if hit and w.location == t.loop.location and w.backward == hit[0].backward:
                hit.append(w)
                break
    return taken


# --- putting it together -------------------------------------------------------------------
def find_loops(
    closed_jaxpr: Any,
    traced: Traced,
    module: HloModule | None,
    info: CompiledInfo | None,
    locator: Locator,
    kinds: CallKinds,
) -> list[Loop]:
    """The loops of one compile, in program order (outer loops before the loops inside them)."""
    if not any(e.primitive in ("scan", "while") for e in traced.eqns):
        return []  # most programs: no walk at all
    tloops, total = _traced_loops(closed_jaxpr, traced, kinds)
    if not tloops:
        return []
    whiles = _xla_whiles(module, locator, kinds) if module is not None and info else []
    matched = _match(tloops, whiles)
    by_comp: dict[str, list[str]] = {}
    for k in info.kernels if info is not None else ():
        by_comp.setdefault(k.computation, []).append(k.name)
    groups = _compiled_groups(info, whiles)
    for t in tloops:
        loop = t.loop
        found = matched.get(loop.index, [])
        loop.whiles = [w.instr.name for w in found]
        comps: set[str] = set().union(*(w.computations for w in found)) if found else set()
        loop.body_kernels = sorted({k for c in comps for k in by_comp.get(c, ())})
        loop.every_iteration = sorted({k for w in found for k in by_comp.get(w.body or "", ())})
        loop.compiled_groups = [g for w in found for g in groups.get(w.instr.name, [])]
        if found:
            loop.one_kernel = found[0].small_call
            loop.xla_trip_count = found[0].trip
            if loop.trip_count is None and found[0].trip is not None:
                loop.trip_count, loop.trip_count_from = found[0].trip, "XLA"
        loop.changes = _changes(t, found, info, total, comps, module is not None)
    loops = [t.loop for t in tloops]
    _label_groups(loops, traced.graph, info.graph if info is not None else None)
    return loops


def _label_groups(loops: list[Loop], traced: Graph, compiled: Graph | None) -> None:
    """Name each loop's body in the pictures as the loop (``scan × 6 · line 6``): the traced
    body group, and the compiled graph's groups of its ``while`` (body first, then the
    condition, each with the ``while``'s name)."""
    groups = {g.id: g for g in traced.groups}
    cgroups = {g.id: g for g in compiled.groups} if compiled is not None else {}
    for loop in loops:
        if loop.body_group in groups:
            groups[loop.body_group].label = loop.label
        for gid in loop.compiled_groups:
            g = cgroups.get(gid)
            if g is not None and not g.label.startswith(loop.label):
                name, _, part = g.label.partition(" ")
                what = "condition · " if part == "condition" else ""
                g.label = f"{loop.label} · {what}{name}"


def _compiled_groups(info: CompiledInfo | None, whiles: list[_While]) -> dict[str, list[str]]:
    """XLA ``while`` name -> the compiled graph's groups of its body, then its condition (the
    condition's label says ``condition`` from here on)."""
    out: dict[str, list[str]] = {}
    bodies = {w.instr.name: w.body for w in whiles}
    for g in info.graph.groups if info is not None else ():
        if g.kind != "loop":
            continue
        name, _, comp = g.label.partition(" ")
        if name not in bodies:
            continue
        if comp == bodies[name]:
            out.setdefault(name, []).insert(0, g.id)
        else:
            g.label = f"{name} condition"
            out.setdefault(name, []).append(g.id)
    return out


def _changes(
    t: _Traced,
    found: list[_While],
    info: CompiledInfo | None,
    total: Counter,
    comps: set[str],
    compiled: bool,
) -> list[str]:
    loop, out = t.loop, []
    trips = loop.trip_count
    # JAX's lowering (``_scan_impl``): unroll=k > 1 runs length // k iterations of k copies
    # and the remaining length % k inline; unroll >= length leaves no loop at all
    jax_unrolled = loop.unroll > 1 and trips is not None and loop.unroll >= trips
    if jax_unrolled:
        out.append(f"unrolled by JAX (unroll={loop.unroll}): no loop in the program XLA got")
    elif loop.unroll > 1:
        rest = f", the last {trips % loop.unroll} inline" if trips and trips % loop.unroll else ""
        out.append(
            f"unrolled ×{loop.unroll} by JAX (unroll={loop.unroll}): each XLA iteration runs "
            f"{loop.unroll} copies of the body{rest}"
        )
    if not compiled:
        return out
    # locations whose every equation is inside this loop's body: kernels there belong to it
    # (with the loop's own line where no loop is left: JAX's and XLA's unrolled plumbing)
    own = {loc for loc, n in t.body_locations.items() if total[loc] == n}
    if not found:
        start = loop.location
        with_line = {loc for loc, n in t.body_locations.items() if total[loc] == n + (loc == start)}
        if start is not None and total[start] == 1 + t.body_locations[start]:
            with_line.add(start)
        placed = _kernels_at(info, own | with_line) if info is not None else {}
        if not jax_unrolled:
            out.append(
                f"XLA unrolled it: no while loop is left, its body runs inline ({len(placed)} "
                "kernel(s) come from it alone)"
                if placed
                else "XLA left no while loop of it (unrolled or removed): its body's ops "
                "share kernels with the code around it"
            )
        loop.body_kernels = sorted(placed)
        return out
    placed = _kernels_at(info, own) if info is not None else {}
    xla_trips = found[0].trip
    if xla_trips is not None and trips and loop.unroll == 1 and xla_trips != trips:
        out.append(f"XLA's loop runs {xla_trips} times (the traced loop {trips})")
    if len(found) > 1:
        out.append(f"XLA split it into {len(found)} while loops")
    hoisted = sorted(k for k, comp in placed.items() if comp not in comps)
    if hoisted:
        shown = ", ".join(hoisted[:3]) + (", …" if len(hoisted) > 3 else "")
        out.append(
            f"XLA hoisted {len(hoisted)} kernel(s) out of the loop (loop-invariant): {shown}"
        )
    if found[0].small_call is not None:
        out.append(
            f"XLA:CPU compiles the whole loop into one kernel "
            f"({found[0].small_call}, a small call): a profile sees no iteration of it"
        )
    fused = {f.name for f in info.fusions} if info is not None else set()
    n = len(loop.body_kernels)
    if n:
        k = sum(1 for name in loop.body_kernels if name in fused)
        every = len(loop.every_iteration)
        out.append(
            f"XLA made its body {n} kernel(s) ({k} fusions); {every} of them run in every "
            "iteration, the others in a branch, an inner loop or the loop's condition"
            if every < n
            else f"XLA made its body {n} kernel(s) ({k} fusions), all run in every iteration"
        )
    return out


def _kernels_at(info: CompiledInfo, locations: set[Location]) -> dict[str, str]:
    """Kernel -> its computation, for the kernels whose every location is in ``locations``."""
    if not locations:
        return {}
    out: dict[str, str] = {}
    for k in info.kernels:
        sites = info.sites.get(k.name)
        if sites and sites[1] and all(loc in locations for loc in sites[1]):
            out[k.name] = k.computation
    return out
