"""``--profile`` across JAX processes: every process profiles its own run, side by side.

Each process measures its own calls (:func:`nbcompile.measure.profile`); the calls meet at the
program's collectives, so the processes run them together. Afterwards every process writes a
summary — its median step and each kernel's median seconds per call — to ``jax.distributed``'s
key-value store under the compile's own namespace (:mod:`._agree`) and reads every other
process's, bounded by :func:`~nbcompile.processes.process_timeout`, each checked against the
exchange's schema (``_schema``). What it gets is a
:class:`ProcessProfiles` on ``c.profile.processes``: per process its step, the time in its own
kernels and the time in the collectives that cross processes (waiting for the others, mostly),
the slowest process (the one the others wait for: the least time in those collectives) and each
kernel's spread across processes. A process whose summary does not come in time, or sent one
that does not fit the schema (another nbcompile version: ``NBC804`` in the note, the same on
every process), leaves ``processes`` None and a note on the profile: the profile itself stands.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import jax

from .. import _compat
from ..errors import TargetError
from ..units import format_seconds
from . import _schema
from ._agree import _exchange, profile_space
from ._cluster import process_timeout

__all__ = ["KernelSpread", "ProcessProfile", "ProcessProfiles", "gather_profiles"]


@dataclass(frozen=True)
class ProcessProfile:
    """One process's profile: ``step_seconds`` (median call), ``kernels`` (kernel name →
    median seconds per call), ``own_seconds`` (in kernels other than the collectives that cross
    processes) and ``collective_seconds`` (in those collectives: sending, receiving and waiting
    for the slowest process)."""

    index: int
    host: str
    calls: int
    step_seconds: float
    kernels: dict[str, float]
    own_seconds: float
    collective_seconds: float

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class KernelSpread:
    """One kernel on every process: ``seconds[i]`` on process ``i`` (None where that process
    recorded none of it); ``crosses_processes`` for a collective whose groups span processes."""

    name: str
    opcode: str
    seconds: tuple[float | None, ...]
    crosses_processes: bool

    @property
    def slowest(self) -> int:
        """The process that spent the most time in it."""
        return max(range(len(self.seconds)), key=lambda i: self.seconds[i] or 0.0)

    @property
    def spread_seconds(self) -> float:
        """Most minus least seconds across processes."""
        known = [s for s in self.seconds if s is not None]
        return max(known) - min(known) if known else 0.0

    @property
    def ratio(self) -> float | None:
        """Most over least seconds across processes (None where one is 0 or missing)."""
        known = [s for s in self.seconds if s is not None]
        if len(known) < len(self.seconds) or not min(known):
            return None
        return max(known) / min(known)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "opcode": self.opcode,
            "seconds": list(self.seconds),
            "crosses_processes": self.crosses_processes,
            "slowest": self.slowest,
            "spread_seconds": self.spread_seconds,
            "ratio": self.ratio,
        }


@dataclass(frozen=True)
class ProcessProfiles:
    """``--profile`` on every process, side by side (``c.profile.processes``)."""

    processes: tuple[ProcessProfile, ...]
    kernels: tuple[KernelSpread, ...]  # the longest (on any process) first
    notes: tuple[str, ...] = field(default=())

    @property
    def slowest(self) -> int:
        """The process the others wait for: the one with the least time in the collectives
        that cross processes (it arrives last; the others wait there for it). Its lateness may
        be in its own kernels or between them -- a busy thread on a process delays its kernels'
        dispatch more than the kernels (measured: 19 ms waiting on the other process, its own
        kernels no slower). Without such collectives: the most time in its own kernels."""
        if any(p.collective_seconds > 0 for p in self.processes):
            return min(self.processes, key=lambda p: (p.collective_seconds, -p.own_seconds)).index
        return max(self.processes, key=lambda p: p.own_seconds).index

    def kernel(self, name: str) -> KernelSpread:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(f"no kernel {name!r} in these profiles")

    def to_json(self) -> dict[str, Any]:
        return {
            "processes": [p.to_json() for p in self.processes],
            "kernels": [k.to_json() for k in self.kernels],
            "slowest": self.slowest,
            "notes": list(self.notes),
        }

    def text(self, top: int = 8) -> str:
        n = len(self.processes)
        lines = [
            f"profile on every process (medians per call, {self.processes[0].calls} calls each):"
        ]
        width = max([len("process"), *(len(k.name) + 2 for k in self.kernels[:top])])
        lines.append(
            f"  {'process':<{width}}  {'step':>10}  {'own kernels':>12}  "
            f"{'in collectives across processes':>31}"
        )
        for p in self.processes:
            mark = "  ← slowest" if p.index == self.slowest and n > 1 else ""
            lines.append(
                f"  {p.index:<{width}}  {format_seconds(p.step_seconds):>10}  "
                f"{format_seconds(p.own_seconds):>12}  "
                f"{format_seconds(p.collective_seconds):>31}{mark}"
            )
        head = "".join(f"  {f'process {i}':>10}" for i in range(n))
        lines.append(f"  {'kernel':<{width}}{head}  spread")
        for k in self.kernels[:top]:
            cells = "".join(
                f"  {format_seconds(s) if s is not None else '–':>10}" for s in k.seconds
            )
            ratio = f"×{k.ratio:.2f}" if k.ratio is not None else "–"
            tag = " ⇄" if k.crosses_processes else ""
            lines.append(f"  {k.name + tag:<{width}}{cells}  {ratio} (most on process {k.slowest})")
        if len(self.kernels) > top:
            lines.append(f"  … {len(self.kernels) - top} more kernels")
        lines.append("  ⇄ crosses processes: its time includes waiting for the slowest process")
        lines.extend(f"  note: {note}" for note in self.notes)
        return "\n".join(lines)


def _crossing_names(comp: Any) -> set[str]:
    names = {c["name"] for c in comp.collectives if c.get("crosses_processes")}
    # an async collective runs as its -start / -done halves
    return names | {f"{n}-start" for n in names} | {f"{n}-done" for n in names}


def _summary(comp: Any, profile: Any, crossing: set[str]) -> dict[str, Any]:
    kernels = {k.name: [k.opcode, k.seconds] for k in profile.kernels}
    collective = sum(s for name, (_, s) in kernels.items() if name in crossing)
    return {
        "calls": profile.calls,
        "step": profile.step_seconds,
        "kernels": kernels,
        "own": sum(s for _, s in kernels.values()) - collective,
        "collective": collective,
    }


def side_by_side(
    payloads: list[dict[str, Any]], hosts: list[str], crossing: set[str]
) -> ProcessProfiles:
    """Build the side-by-side view from every process's summary (``payloads[i]``: process
    ``i``'s, as :func:`gather_profiles` exchanges them)."""
    processes = tuple(
        ProcessProfile(
            index=i,
            host=hosts[i] if i < len(hosts) else "",
            calls=int(p["calls"]),
            step_seconds=float(p["step"]),
            kernels={name: float(s) for name, (_, s) in p["kernels"].items()},
            own_seconds=float(p["own"]),
            collective_seconds=float(p["collective"]),
        )
        for i, p in enumerate(payloads)
    )
    opcodes: dict[str, str] = {}
    for p in payloads:
        for name, (opcode, _) in p["kernels"].items():
            opcodes.setdefault(name, opcode)
    spreads = [
        KernelSpread(
            name=name,
            opcode=opcode,
            seconds=tuple(p.kernels.get(name) for p in processes),
            crosses_processes=name in crossing,
        )
        for name, opcode in opcodes.items()
    ]
    spreads.sort(key=lambda k: -max(s or 0.0 for s in k.seconds))
    notes = []
    calls = {p.calls for p in processes}
    if len(calls) > 1:
        notes.append(f"the processes measured different numbers of calls: {sorted(calls)}")
    return ProcessProfiles(processes, tuple(spreads), tuple(notes))


def gather_profiles(comp: Any, profile: Any) -> ProcessProfiles | None:
    """Exchange this process's profile summary with every other JAX process's and return them
    side by side; None (and a note on ``profile``) where the others' do not come in time, with
    one process, or for an estimate (nothing ran)."""
    client = _compat.distributed_client()
    space = profile_space(comp)
    n = jax.process_count()
    if n <= 1 or client is None or space is None or profile.source != "measured":
        return None
    crossing = _crossing_names(comp)
    mine = _summary(comp, profile, crossing)
    timeout = process_timeout()
    try:
        raw = _exchange(
            client, space, _schema.encode("profile", mine), n, timeout, "this --profile"
        )
    except TargetError as err:
        profile.notes.append(f"no side-by-side view of the processes' profiles: {err}")
        return None
    # the same summaries checked on every process: the same note everywhere
    payloads, unreadable = _schema.read_all(raw, "profile")
    if unreadable:
        err = TargetError(
            _schema.describe(unreadable, "profile summaries"), code="NBC804", hint=_schema.HINT
        )
        profile.notes.append(f"no side-by-side view of the processes' profiles: {err}")
        return None
    return side_by_side(payloads, [p.host for p in comp.processes], crossing)
