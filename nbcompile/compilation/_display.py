"""How a Compilation shows itself: the report JSON, text, static HTML and the widget.

A mixin of :class:`~nbcompile.compilation.Compilation` (no fields of its own). The report is
rebuilt only when this run's results, notes or timings change, so re-displays are instant.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .. import _gc
from ..stages import Progress

if TYPE_CHECKING:
    from ..pipeline import Program

__all__ = ["Display"]


class Display:
    """``report``, ``extras``, ``save_html``, ``to_dot`` and the display protocol."""

    __slots__ = ()
    if TYPE_CHECKING:  # the Compilation's fields these methods use
        program: Program
        adapted: Any
        cache_hit: bool
        grad: Any
        _notes: list[str]
        _changes: list[str]
        _changes_diff: Any
        _timings: dict[str, float]
        _report: Any
        _shown: Any
        _display: Any
        _bench: Any
        _ablation: Any
        _debug: Any
        _frozen: Any
        _profile: Any
        _memory_map: Any
        _metal: Any
        _processes: tuple[Any, ...]

    @property
    def extras(self) -> Mapping[str, Any]:
        """What the report shows besides the analysis (bench, ablate, debug, freeze, target,
        changes, profile, memory; passes with XLA's dump), as JSON-ready dicts. Read-only."""
        out: dict[str, Any] = {}
        if not self.target.present or self.target.mesh is not None:
            out["target"] = self._target_json()
        for key, value in (
            ("bench", self._bench),
            ("ablate", self._ablation),
            ("debug", self._debug),
            ("freeze", self._frozen),
            ("profile", self._profile),
            ("memory", self._memory_map),
        ):
            if value is not None:
                out[key] = {**value.to_json(), "text": value.text()}
        if self._processes:
            from ..processes import processes_view

            out["processes"] = processes_view(self)
        if self._changes:
            out["changes"] = {"text": "\n".join(self._changes), "items": list(self._changes)}
        if self._metal is not None:  # --passes, or c.passes was read: XLA's dump is here
            out["passes"] = self._metal_json(out.get("profile"))

        return MappingProxyType(out)

    def _metal_json(self, profile: Any) -> dict[str, Any]:
        """The Passes tab and the kernels' code (nbcompile/report/metal.py), built once per
        dump and profile."""
        from ..errors import NbcompileError
        from ..report.metal import metal_json

        # the view compiles nothing: a library fusion's stand-in code (XLA's own, library off)
        # is shown once c.kernel_code made it
        key = (id(self._profile), self._metal.libraries_off is not None)
        cached = self._metal.view
        if cached is None or cached[0] != key:
            document = self.analysis.to_json()
            view = metal_json(
                self._metal.passes,
                document.get("fusions") or [],
                lambda name: self._kernel_code(name, compile_library_off=False),
                library_of=self._library_call,
                lines=document.get("lines") or {},
                profile=profile,
                errors=(NbcompileError, KeyError, ImportError),
            )
            self._metal.view = cached = (key, view)
        return cached[1]

    def _target_json(self) -> dict[str, Any]:
        from ..targets import target_summary

        return target_summary(
            self.target, self.placement, self.stages.output_shardings, self.collectives
        )

    def _report_timings(self) -> dict[str, float]:
        """Timings the report shows: all but building and displaying the report itself."""
        return {k: v for k, v in self.timings.items() if k not in ("report", "display")}

    def _state_key(self) -> tuple[Any, ...]:
        results = (
            self._bench,
            self._ablation,
            self._debug,
            self._frozen,
            self._profile,
            self._memory_map,
            self._changes_diff,
            self._metal,
            self._metal.libraries_off if self._metal is not None else None,
        )
        return (
            tuple(id(r) for r in results),
            tuple(self._notes),
            tuple(self._changes),
            tuple(sorted(self._report_timings().items())),
        )

    def report(self, progress: Progress | None = None) -> dict[str, Any]:
        """The JSON report every view reads (docs/report-schema.md); rebuilt only when this
        run's results, notes or timings change (re-displays are instant). ``progress`` is told
        each analysis stage, if the analysis runs now."""
        from ..report import build_report

        self._analyse(progress)  # analyse first: it adds to the timings
        if self.grad is not None:  # counted as grad_analyse, not as report
            self.grad._analyse((lambda m: progress(f"{m} (gradient)")) if progress else None)
        key = self._state_key()
        if self._report is None or self._report[0] != key:
            t0 = time.perf_counter()
            with _gc.paused():  # ~10^5 small acyclic dicts and lists (nbcompile/_gc.py)
                report = build_report(
                    self.analysis.to_json(),
                    meta=self._meta(),
                    extras=dict(self.extras),
                    grad=self.grad.analysis.to_json() if self.grad is not None else None,
                    node_values=self._debug_values(),
                    module_classes=self._module_classes(),
                )
            since = self._changes_diff() if self._changes_diff is not None else None
            if since is not None and "changes" in report["extras"]:
                from ..comparison import diff_compilations

                # the "what changed" card links to the visual diff against the last run
                report["extras"]["changes"]["diff"] = diff_compilations(
                    since, self, after_report=report
                ).view
            self._timings["report"] = time.perf_counter() - t0
            self._report = (self._state_key(), report)
        return self._report[1]

    def _module_classes(self) -> dict[str, str]:
        """The class of each module of the adapted models, by module path (frames say it)."""
        from ._classes import module_classes

        return module_classes(self.adapted.models)

    def _param_args(self) -> list[str]:
        """The arguments whose arrays are the model's parameters (the graph's group subtitles
        count a layer's parameters from them): a model's, and those ``--grad`` differentiates."""
        adapted = self.adapted
        names, n = list(adapted.arg_names), len(adapted.args)
        nums = {*adapted.params_argnums, *(a % n for a in (self.grad_argnums or ()) if n)}
        return [names[i] for i in sorted(nums) if i < len(names)]

    def _meta(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "backend": self.backend,
            "source": self.source.to_json(),
            "signature": self.signature,
            "param_args": self._param_args(),
            "options": self.options,
            "notes": list(self._notes),
            "timings": self._report_timings(),
            "cache_hit": self.cache_hit,
        }

    def _debug_values(self) -> dict[str, dict[str, Any]] | None:
        """Each traced-graph node's ``--debug`` value summary (None without ``--debug``)."""
        if self._debug is None or self._debug._jaxpr is not self.jaxpr:
            return None  # none, or --grad's run of the value_and_grad program (other nodes)
        from ..debug import equation_ids

        eqn_nodes = self.analysis.traced_graph.eqn_nodes
        values: dict[str, dict[str, Any]] = {}
        for debug_id, eqn in equation_ids(self.jaxpr):
            summary = self._debug.summaries.get(debug_id)
            node = eqn_nodes.get(id(eqn))
            if summary is not None and node is not None:
                value = {"id": debug_id, **(summary.get("outputs") or [{}])[0]}
                if self._debug.nan_at and self._debug.nan_at.get("id") == debug_id:
                    value["first_nan"] = True
                values[node] = value
        return values

    def save_html(self, path: str) -> str:
        """Write the whole view as one self-contained offline HTML file; returns the path."""
        from pathlib import Path

        from ..widgets import static_page

        Path(path).write_text(static_page(self.report(), title=self.name), encoding="utf-8")
        return str(path)

    def to_dot(self, which: str = "traced") -> Any:
        """The ``traced`` / ``compiled`` / ``gradient`` graph as a ``graphviz.Digraph``."""
        from ..report.dot import to_dot

        graph = self.report()["graphs"].get(which)
        if graph is None:
            raise ValueError(f"no {which!r} graph in this compilation")
        return to_dot(graph, name=f"{self.name}_{which}")

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        if self._processes:  # several JAX processes: the view is on process 0, one line here
            from ..processes import one_line

            line = one_line(self)
            if line is not None:
                return {"text/plain": line}
            # an engine's widgets do not reach the notebook: the self-contained HTML view only
            return self._bundle(widget=False)
        return self._bundle()

    def _bundle(self, *, widget: bool = True) -> dict[str, Any]:
        from ..widgets import show

        t0 = time.perf_counter()
        report = self.report()
        self._shown = show(report, self._display, self._shown, widget=widget)
        self._timings.setdefault("display", time.perf_counter() - t0)
        return dict(self._shown.bundle)

    def __repr__(self) -> str:
        from ..report import text_summary

        if self._processes:
            from ..processes import one_line

            line = one_line(self)
            if line is not None:
                return line

        t0 = time.perf_counter()
        text = text_summary(self.report())
        self._timings.setdefault("display", time.perf_counter() - t0)
        return text
