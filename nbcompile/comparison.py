"""``c_new.diff(c_old)``: what changed between two compilations, as data and as a view.

A :class:`CompilationDiff` puts together what each layer knows about the change: the program
(:class:`nbcompile.analysis.Diff`: ops, fusions, folded constants, costs, signature), measured
time when both sides were profiled (:func:`nbcompile.measure.profile_delta`: per kernel, per
line, per module) and the memory peak when both sides have a memory map. Attributes of the
program diff (``ops_added``, ``fusions_removed``, ``changed``...) read through.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["CompilationDiff", "diff_compilations"]


@dataclass
class CompilationDiff:
    """What changed from ``before`` to ``after`` (names of the two compilations)."""

    before: str
    after: str
    program: Any
    time: Any | None = None
    memory: dict[str, Any] | None = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.program, name)

    def to_json(self) -> dict[str, Any]:
        return {
            "before": self.before, "after": self.after, "program": self.program.to_json(),
            "time": self.time.to_json() if self.time is not None else None,
            "memory": self.memory,
        }

    def text(self) -> str:
        lines = [f"{self.after} vs {self.before}:"]
        program = self.program.to_json()
        for what in ("ops", "fusions", "folded"):
            added, removed = program[what]["added"], program[what]["removed"]
            if added or removed:
                lines.append(f"  {what}: +{len(added)} / -{len(removed)}")
        if self.time is not None:
            lines += ["  " + ln for ln in self.time.text().splitlines()]
        if self.memory is not None:
            lines.append(f"  memory peak: {self.memory['before']} → {self.memory['after']} bytes "
                         f"({self.memory['source']})")
        if len(lines) == 1:
            lines.append("  no change")
        return "\n".join(lines)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return {"text/plain": self.text()}


def diff_compilations(before: Any, after: Any) -> CompilationDiff:
    """The :class:`CompilationDiff` of two :class:`~nbcompile.Compilation`\\ s."""
    from .analysis import diff

    time = None
    if before.profile is not None and after.profile is not None:
        from .measure import profile_delta

        time = profile_delta(before.profile, after.profile)
    memory = None
    maps = (before.memory_map_if_computed, after.memory_map_if_computed)
    if all(m is not None for m in maps):
        memory = {"before": maps[0].peak_bytes, "after": maps[1].peak_bytes, "source": "XLA"}
    return CompilationDiff(before=before.name, after=after.name,
                           program=diff(before.analysis, after.analysis), time=time,
                           memory=memory)
