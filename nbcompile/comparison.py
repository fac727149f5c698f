"""``c_new.diff(c_old)``: what changed between two compilations, as data and as a view.

A :class:`CompilationDiff` puts together what each layer knows about the change: the program
(:class:`nbcompile.analysis.Diff`: ops, fusions, folded constants, costs, signature), measured
time when both sides were profiled (:func:`nbcompile.measure.profile_delta`: per kernel, per
line, per module) and the memory peak when both sides have a memory map. Attributes of the
program diff (``ops_added``, ``fusions_removed``, ``changed``...) read through.

Displayed, it is the diff view (``view``: :func:`nbcompile.report.diffview.diff_report` of the two
reports — the compiled graphs side by side with kernels added / removed / changed coloured, per
kernel and per line deltas, the changed cell lines), as a widget with a static fallback.
:func:`compare_compilations` (``nbcompile.compare``) shows the same view for two targets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["CompilationDiff", "TargetComparison", "compare_compilations", "diff_compilations"]


@dataclass
class CompilationDiff:
    """What changed from ``before`` to ``after`` (names of the two compilations)."""

    before: str
    after: str
    program: Any
    time: Any | None = None
    memory: dict[str, Any] | None = None
    #: the diff view's JSON (schema ``nbcompile.diff/1``); None when built without reports
    view: dict[str, Any] | None = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.program, name)

    def to_json(self) -> dict[str, Any]:
        return {
            "before": self.before,
            "after": self.after,
            "program": self.program.to_json(),
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
            lines.append(
                f"  memory peak: {self.memory['before']} → {self.memory['after']} bytes "
                f"({self.memory['source']})"
            )
        if len(lines) == 1:
            lines.append("  no change")
        return "\n".join(lines)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        if self.view is None:
            return {"text/plain": self.text()}
        from .widgets import show_diff

        return show_diff(self.view, self.text())


def diff_compilations(
    before: Any, after: Any, after_report: dict[str, Any] | None = None
) -> CompilationDiff:
    """The :class:`CompilationDiff` of two :class:`~nbcompile.Compilation`\\ s
    (``after_report``: ``after``'s report when it is being built, for its "what changed"
    card)."""
    from .analysis import diff

    time = None
    if before.profile is not None and after.profile is not None:
        from .measure import profile_delta

        time = profile_delta(before.profile, after.profile)
    memory = None
    maps = (before.memory_map_if_computed, after.memory_map_if_computed)
    if all(m is not None for m in maps):
        memory = {"before": maps[0].peak_bytes, "after": maps[1].peak_bytes, "source": "XLA"}
    from .report.diffview import diff_report

    program = diff(before.analysis, after.analysis)
    view = diff_report(
        before.report(),
        after_report or after.report(),
        program=program.to_json(),
        time=time.to_json() if time is not None else None,
        memory=memory,
    )
    return CompilationDiff(
        before=before.name, after=after.name, program=program, time=time, memory=memory, view=view
    )


@dataclass
class TargetComparison:
    """``nbcompile.compare(c_cpu, c_tpu, ...)``: the side-by-side table (``table``, a
    :class:`nbcompile.targets.Comparison`; ``text()``) and the diff view of the first
    compilation against each other one (``views``), displayed like ``c_new.diff(c_old)``."""

    table: Any
    views: list[dict[str, Any]]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.table, name)

    def __getitem__(self, key: Any) -> Any:  # the table is a dict (``["rows"]``, ``["only_in"]``)
        return self.table[key]

    def text(self) -> str:
        return str(self.table.text())

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        if not self.views:
            return {"text/plain": self.text()}
        from .widgets import show_diff

        return show_diff(self.views[0], self.text())


def compare_compilations(table: Any, *compilations: Any) -> TargetComparison:
    """The same model compiled for several targets: ``table`` (the side-by-side rows,
    :func:`nbcompile.targets.compare` of them, which ``nbcompile.compare`` builds), and the diff
    view of the first compilation against each other one (kernels that exist on one target
    only, flops and bytes per kernel and per line)."""
    from .report.diffview import diff_report

    def label(c: Any) -> str:
        return str(c.target.label).upper().replace("CUDA", "GPU")

    first = compilations[0]
    views = [
        diff_report(
            first.report(),
            c.report(),
            labels=(label(first), label(c)),
            notes=[f"{label(c)} against {label(first)}: the same model compiled for two targets"],
        )
        for c in compilations[1:]
    ]
    return TargetComparison(table=table, views=views)
