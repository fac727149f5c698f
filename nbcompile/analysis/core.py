"""``analyse(artifacts) -> Analysis``: the program as trustworthy data.

One pass over each artifact: the jaxpr is walked once (traced graph, phases, analytic cost),
the optimised HLO text is parsed once (fusions, kernels, compiled graph, per-kernel XLA cost),
and the pre-optimisation HLO is parsed only when it is needed (op count and constant folding).
Anything a backend cannot give stays None, and a note says why.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .. import _gc
from .._compat import stablehlo_ops
from ..capture.source import Location
from .artifacts import Artifacts
from .calls import CallKinds, annotate_compiled, call_kinds
from .compiled import CompiledInfo, Fusion, analyse_compiled, infer_missing_sites, is_scalar_kernel
from .cost import analytic_cost, normalise_cost, normalise_memory
from .folding import Folded, find_folded, has_const_candidates
from .gradient import Gradient, analyse_gradient
from .graph import Graph
from .hlo import HloModule, HloParseError, count_instructions, parse_hlo
from .lines import Locator
from .located import line_maps, source_texts
from .loops import Loop, find_loops
from .shares import Shares, kernel_shares
from .traced import Traced, trace_graph

__all__ = ["Analysis", "analyse"]


@dataclass
class Analysis:
    """Everything nbcompile knows about one compile. See docs/report-schema.md for to_json().

    ``lines`` maps lines of the compiling cell (plain numbers), ``located`` the lines of every
    other contributing cell or user file (:class:`~nbcompile.capture.source.Location`) to what
    came from them; ``sources`` holds those cells' and files' text. ``kernel_sites`` /
    ``kernel_modules`` (read them through :func:`locations_of` / :func:`modules_of`) map every
    kernel to its sources. ``timings`` gives seconds per analysis stage (they add up to the
    whole analysis); ``fingerprint`` identifies the program (None when it was not compiled).
    """

    traced_graph: Graph
    compiled_graph: Graph | None
    fusions: list[Fusion]
    folded: list[Folded]
    gradient: Gradient | None
    cost: dict[str, float | None] | None
    memory: dict[str, float | None] | None
    analytic: dict[str, float]
    lines: dict[int, dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    collectives: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, int | None] = field(default_factory=dict)
    kernel_costs: dict[str, dict[str, float]] = field(default_factory=dict)
    located: dict[Location, dict[str, Any]] = field(default_factory=dict)
    sources: list[dict[str, Any]] = field(default_factory=list)
    kernel_sites: dict[str, tuple[list[int], list[Location]]] = field(default_factory=dict)
    kernel_modules: dict[str, list[str]] = field(default_factory=dict)
    #: kernel -> call paths of the user's calls its ops came from (``analysis/calls.py``)
    kernel_functions: dict[str, list[str]] = field(default_factory=dict)
    #: what :attr:`kernel_shares` is made from on first use: (the compiled program, weakly
    #: held, or its optimised HLO text; fusion kernel names; the sources; call labels); None
    #: once made (or nothing to make it from)
    shares_from: tuple[Any, list[str], Any, CallKinds] | None = field(
        default=None, repr=False, compare=False
    )
    _shares: dict[str, Shares] | None = field(default=None, repr=False, compare=False)
    #: the labels of the user's calls in this program's name stacks (``analysis/calls.py``)
    call_kinds: CallKinds = field(default_factory=CallKinds)
    timings: dict[str, float] = field(default_factory=dict)
    _json: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    fingerprint: str | None = None
    walk_order: list[str] = field(default_factory=list, repr=False)  # eqn node ids, walk order
    #: every loop of the program, in program order (``analysis/loops.py``)
    loops: list[Loop] = field(default_factory=list)

    @property
    def kernel_shares(self) -> dict[str, Shares]:
        """Fusion -> how its cost divides among its lines, modules and calls
        (``analysis/shares.py``). Only ``--profile`` and ``--memory`` read it, so it is made on
        first use, from the optimised HLO parsed again (~0.2 s for a GPT-2-small train step;
        the parsed module of the analysis is not kept: tens of MB, nor the text: the compiled
        program, which those measurements run, is held weakly and prints it again). Empty
        where that program is gone."""
        if self._shares is None:
            self._shares = {}
            source, names, sources, kinds = self.shares_from or (None, [], None, None)
            program = source() if isinstance(source, weakref.ref) else None
            text = source if isinstance(source, str) else _hlo_text(program)
            if text is not None and sources is not None and kinds is not None:
                locator = Locator(sources)
                module = parse_hlo(text)
                kernels = [i for c in module.computations.values() for i in c.instructions]
                wanted = set(names)
                self._shares = kernel_shares(
                    module, [i for i in kernels if i.name in wanted], locator, kinds
                )
            self.shares_from = None
        return self._shares

    @property
    def cost_source(self) -> str | None:
        """ "XLA" (``cost_analysis()``), "estimate" (nbcompile's static figures) or None."""
        if self.cost is None:
            return None
        return "estimate" if self.cost.get("estimate") else "XLA"

    def summary(self) -> dict[str, Any]:
        cost = self.cost or {}
        flops = cost.get("flops")
        nbytes = cost.get("bytes_accessed")
        memory = self.memory or {}
        cost_from = self.cost_source or "XLA"
        labels = {
            "flops": cost_from if flops is not None else "estimate",
            "bytes_accessed": cost_from,
            "transcendentals": cost_from,
            "analytic_flops": "estimate",
            "analytic_bytes": "estimate",
            "bytes_saved_by_fusion": "estimate",
            "residual_bytes": "estimate",
            "peak_bytes": "estimate" if memory.get("peak_bytes_is_bound") else "XLA",
        }
        return {
            **self.counts,
            "fusions": len(self.fusions),
            "folded_constants": sum(1 for f in self.folded if f.folded),
            # where XLA gives no cost, nbcompile's count from the jaxpr, labelled an estimate
            "flops": flops if flops is not None else self.analytic.get("flops"),
            "bytes_accessed": nbytes,
            "transcendentals": cost.get("transcendentals"),
            "analytic_flops": self.analytic.get("flops"),
            "analytic_bytes": self.analytic.get("bytes_accessed"),
            "bytes_saved_by_fusion": sum(f.bytes_saved for f in self.fusions),
            "residual_bytes": self.gradient.residual_bytes if self.gradient else None,
            "collectives": len(self.collectives),
            "peak_bytes": memory.get("peak_bytes"),
            "from": labels,
        }

    def lines_json(self) -> dict[str, dict[str, Any]]:
        """The per-line map of every contributing source: compiling-cell lines under their
        number, other cells and files under their location label (``In [3] line 7``)."""
        out: dict[str, dict[str, Any]] = {str(k): v for k, v in sorted(self.lines.items())}
        for loc in sorted(self.located, key=Location.sort_key):
            out[loc.label] = {**self.located[loc], "location": loc.to_json()}
        return out

    def to_json(self) -> dict[str, Any]:
        """The analysis as report JSON, built once (an analysis does not change after it is
        made, except by :func:`refresh_locations`, which drops this); treat it as read-only."""
        if self._json is None:
            self._json = self._build_json()
        return self._json

    def _build_json(self) -> dict[str, Any]:
        cost = dict(self.cost, **{"from": self.cost_source}) if self.cost else self.cost
        memory = self.memory
        if memory:
            bound = memory.get("peak_bytes_is_bound")
            memory = dict(
                memory,
                **{
                    "from": {
                        "*": "XLA",
                        "peak_bytes_is_bound": "XLA",
                        "peak_bytes": "estimate" if bound else "XLA",
                    }
                },
            )
        return {
            "summary": self.summary(),
            "graphs": {
                "traced": _graph_json(self.traced_graph, "estimate"),
                "compiled": _graph_json(self.compiled_graph, "XLA"),
            },
            "fusions": [f.to_json() for f in self.fusions],
            "folded": [f.to_json() for f in self.folded],
            "gradient": self.gradient.to_json() if self.gradient else None,
            "cost": cost,
            "memory": memory,
            "analytic": dict(self.analytic, **{"from": "estimate"}),
            "lines": self.lines_json(),
            "sources": list(self.sources),
            "collectives": [dict(c, **{"from": "XLA"}) for c in self.collectives],
            "loops": [loop.to_json() for loop in self.loops],
            "notes": list(self.notes),
        }


def _graph_json(graph: Graph | None, bytes_from: str) -> dict[str, Any] | None:
    """A graph's JSON with where its figures come from: value sizes from the program's types
    (XLA's shapes for the compiled graph), flops from nbcompile's count (traced graph) or XLA's
    cost model per kernel (compiled graph; shape-based where XLA gave none: see fusions)."""
    if graph is None:
        return None
    out = graph.to_json()
    out["from"] = {"bytes": bytes_from, "flops": bytes_from}
    return out


def _pre_optimisation_text(
    lowered: Any, notes: list[str], early: Callable[[], str | None] | None = None
) -> str | None:
    """Pre-optimisation HLO (with metadata); JAX returns None where a backend cannot give it.
    ``early`` gives the same text where it was converted while XLA compiled."""
    text = early() if early is not None else None
    if text is not None:
        return text
    module = lowered.compiler_ir("hlo")
    if module is None:
        notes.append(
            "pre-optimisation HLO is not available for this backend: op counts before "
            "optimisation and XLA-level folding are not shown"
        )
        return None
    return module.as_hlo_module().to_string()


def _pre_optimisation(text: str | None, notes: list[str]) -> HloModule | None:
    """Parsed only when folding has candidates to check (parsing a big module costs ~0.1 s)."""
    if text is None:
        return None
    try:
        return parse_hlo(text)
    except HloParseError as err:
        notes.append(f"pre-optimisation HLO could not be parsed ({err}); folding not checked")
    return None


def _shares_source(artifacts: Artifacts) -> Any:
    """The compiled program, weakly (its text is printed again when shares are asked for),
    else the optimised text itself."""
    if artifacts.compiled is not None:
        with contextlib.suppress(TypeError):
            return weakref.ref(artifacts.compiled)
    return artifacts.hlo_text


def _hlo_text(compiled: Any) -> str | None:
    if compiled is None:
        return None
    try:
        return compiled.as_text()
    except Exception:  # no text: no shares (they are an estimate)
        return None


def _optimised_text(artifacts: Artifacts) -> str | None:
    text = artifacts.hlo_text
    if text is None and artifacts.compiled is not None:
        text = artifacts.compiled.as_text()  # None where the backend prints no text
    return text


def _optimised(artifacts: Artifacts, notes: list[str]) -> HloModule | None:
    text = _optimised_text(artifacts)
    if text is None:
        notes.append(
            "no optimised HLO: "
            + (
                "this backend prints none"
                if artifacts.compiled is not None
                else "the program was not compiled for this backend"
            )
        )
        return None
    try:
        module = parse_hlo(text)
    except HloParseError as err:
        notes.append(f"optimised HLO could not be parsed ({err}); compiled view unavailable")
        return None
    if artifacts.keep_optimised is not None:
        artifacts.keep_optimised(text, module)
    return module


def _static_cost_estimate(unit_costs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Sum of the per-kernel HLO cost analysis (used where ``cost_analysis()`` gives nothing,
    e.g. deviceless GPU compiles). ``estimate`` marks it as such in every view."""

    def total(key: str) -> float:
        return float(sum(c.get(key) or 0.0 for c in unit_costs.values()))

    return {
        "flops": total("flops"),
        "bytes_accessed": total("bytes accessed"),
        "transcendentals": total("transcendentals"),
        "optimal_seconds": None,
        "estimate": "static",
    }


def _xla_figures(compiled: Any) -> tuple[Any, Any, list[str]]:
    """XLA's cost and memory analyses, normalised, and notes; JAX returns None where a backend
    gives none, and then a note says so (the view shows "not reported", never a made-up
    figure)."""
    notes = []
    cost, memory = compiled.cost_analysis(), compiled.memory_analysis()
    for name, value in (("cost analysis (flops, bytes)", cost), ("memory analysis", memory)):
        if value is None:
            notes.append(f"XLA reports no {name} for this backend")
    return normalise_cost(cost), normalise_memory(memory), notes


class _Beside:
    """``fn(*args)`` run in a thread from now; :meth:`result` waits for it and returns what it
    returned, or raises what it raised (in the caller's thread, as a call there would).
    ``seconds``: the time it took by ``timer``, read in its thread (``time.thread_time``: its
    own CPU time)."""

    def __init__(self, timer: Callable[[], float], fn: Callable[..., Any], *args: Any) -> None:
        self._out: tuple[Any, BaseException | None] = (None, None)
        self._timer = timer
        self.seconds = 0.0
        self._thread = threading.Thread(
            target=self._run, args=(fn, args), name="nbcompile-xla-figures", daemon=True
        )
        self._thread.start()

    def _run(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        t0 = self._timer()
        try:
            self._out = (fn(*args), None)
        except BaseException as exc:  # raised in the caller's thread by result()
            self._out = (None, exc)
        finally:
            self.seconds = self._timer() - t0

    def result(self) -> Any:
        self._thread.join()
        value, exc = self._out
        self._out = (None, None)
        if exc is not None:
            raise exc
        return value


def _stablehlo_ops(lowered: Any) -> int | None:
    module = lowered.compiler_ir("stablehlo")  # None where unavailable (JAX's contract)
    return stablehlo_ops(module)[0] if module is not None else None


def _overlay_fusions(traced: Traced, info: CompiledInfo) -> None:
    """Each traced op's fusion: the one its (primitive, location) landed in."""
    landed = info.landed
    for node in traced.graph.nodes:
        if node.kind == "op":
            node.fusion = landed.get((node.op, node.location))


class _Clock:
    """Seconds per analysis stage, in ``Analysis.timings`` (keys ``analyse.<stage>``). ``timer``
    is wall time (what the user waits); the scaling test swaps in CPU time."""

    timer = staticmethod(time.perf_counter)
    #: the stages in order, and what a progress line says while each runs
    STAGES: ClassVar[dict[str, str]] = {
        "traced": "the traced program",
        "parse": "reading XLA's program",
        "kernels": "kernels and fusions",
        "inferred_sources": "sources of XLA's kernels",
        "pre_optimisation": "op counts before optimisation",
        "folding": "folded constants",
        "gradient": "forward and backward",
        "xla": "XLA's cost and memory",
        "lines": "the per-line map",
        "counts": "op counts",
    }

    def __init__(self, progress: Callable[[str], None] | None = None) -> None:
        self.timings: dict[str, float] = {}
        self._progress = progress
        self._order = list(self.STAGES)
        self._announce(0)
        self._last = self.timer()

    def _announce(self, index: int) -> None:
        if self._progress is not None and index < len(self._order):
            what = self.STAGES[self._order[index]]
            self._progress(f"analysing: {what} ({index + 1}/{len(self._order)})")

    def lap(self, stage: str) -> None:
        now = self.timer()
        key = f"analyse.{stage}"
        self.timings[key] = self.timings.get(key, 0.0) + now - self._last
        if stage in self.STAGES:
            self._announce(self._order.index(stage) + 1)
        self._last = self.timer()


@dataclass
class TracedPart:
    """The part of an analysis that needs only the traced program (and the pre-optimisation
    HLO): made by :func:`analyse_traced`, beside XLA's compile where there is time for it."""

    closed_jaxpr: Any
    name: str
    grad: bool
    locator: Locator
    kinds: CallKinds
    traced: Traced
    pre_text: str | None = None  # the text ``pre`` was parsed from
    pre: HloModule | None = None  # parsed only where folding has candidates to check


def analyse_traced(
    closed_jaxpr: Any,
    source: Any,
    name: str,
    grad: bool,
    calls: Any | None,
    pre_text: str | None = None,
) -> TracedPart:
    """The traced graph (and, given its text, the pre-optimisation module where folding needs
    it). Called by :func:`analyse`, or earlier in the thread that converts the pre-optimisation
    HLO while XLA compiles (``stages.run_stages(beside_compile=...)``), so that a long compile
    hides this part of the analysis."""
    with _gc.paused():  # in XLA's compile's shadow too: 10^5 small acyclic objects (see _gc)
        locator = Locator(source)
        kinds = call_kinds(calls)
        traced = trace_graph(closed_jaxpr, locator, name, grad=grad, calls=kinds)
        part = TracedPart(closed_jaxpr, name, grad, locator, kinds, traced)
        if pre_text is not None and has_const_candidates(traced):
            with contextlib.suppress(HloParseError):  # the analysis parses again, notes why
                part.pre, part.pre_text = parse_hlo(pre_text), pre_text
    return part


def _traced_part(artifacts: Artifacts, grad: bool) -> TracedPart:
    part = artifacts.beside_compile() if artifacts.beside_compile is not None else None
    if (
        isinstance(part, TracedPart)
        and part.closed_jaxpr is artifacts.closed_jaxpr
        and (part.name, part.grad) == (artifacts.name, grad)
    ):
        return part
    return analyse_traced(
        artifacts.closed_jaxpr, artifacts.source, artifacts.name, grad, artifacts.calls
    )


def analyse(artifacts: Artifacts) -> Analysis:
    """Analyse one compile: graphs, fusions, folding, gradient, cost, per-line map."""
    with _gc.paused():  # ~10^5 small acyclic objects; see _gc
        return _analyse(artifacts)


def _analyse(artifacts: Artifacts) -> Analysis:
    notes: list[str] = []
    clock = _Clock(artifacts.progress)
    grad = artifacts.grad_argnums is not None
    # XLA's cost and memory analyses are C++ that lets go of the GIL (~65 ms at 12-layer size,
    # memory_analysis ~50 of them): run beside the Python reading of the program below
    compiled = artifacts.compiled
    figures = _Beside(clock.timer, _xla_figures, compiled) if compiled is not None else None
    part = _traced_part(artifacts, grad)
    source, kinds, traced = part.locator, part.kinds, part.traced
    clock.lap("traced")
    post = _optimised(artifacts, notes)
    clock.lap("parse")
    info = analyse_compiled(post, source, grad, infer=False) if post is not None else None
    clock.lap("kernels")
    functions = annotate_compiled(info, kinds) if info is not None else {}
    shares_from = (
        (
            _shares_source(artifacts),
            [k.name for k in info.kernels if k.opcode == "fusion"],
            artifacts.source,
            kinds,
        )
        if info is not None
        else None
    )
    if info is not None:
        infer_missing_sites(post, info)
    clock.lap("inferred_sources")
    pre_text = (
        _pre_optimisation_text(artifacts.lowered, notes, artifacts.pre_optimisation)
        if artifacts.lowered is not None
        else None
    )
    # the pre-optimisation module is parsed only when folding has candidates to check
    if part.pre is not None and part.pre_text is pre_text:
        pre = part.pre  # parsed beside XLA's compile
    elif pre_text is not None and has_const_candidates(traced):
        pre = _pre_optimisation(pre_text, notes)
    else:
        pre = None
    clock.lap("pre_optimisation")
    folded = find_folded(traced, pre, post, source, artifacts.fn)
    clock.lap("folding")
    gradient = analyse_gradient(artifacts.grad_argnums, traced, info) if grad else None
    clock.lap("gradient")
    cost, memory = (None, None)
    if figures is not None:
        cost, memory, missing = figures.result()
        notes.extend(missing)
        # their own time, in their thread (the "xla" stage is the wait for them, if any)
        clock.timings["analyse.xla_beside"] = figures.seconds
    if cost is None and info is not None and info.unit_costs:
        cost = _static_cost_estimate(info.unit_costs)
        notes.append(
            "XLA reports no cost for this backend: flops/bytes are static estimates "
            "from XLA's HLO cost analysis of the optimised program (no timing model)"
        )
    stablehlo = _stablehlo_ops(artifacts.lowered) if artifacts.lowered is not None else None
    clock.lap("xla")
    if info is not None:
        _overlay_fusions(traced, info)
    lines, located = line_maps(traced, info, source)
    sources = source_texts(located, source.cells)
    clock.lap("lines")
    loops = find_loops(part.closed_jaxpr, traced, post, info, source, kinds)
    clock.lap("loops")  # timed apart, shown with the op counts (a few ms)
    counts = {
        "jaxpr_eqns": len(traced.eqns),
        # the program's primitive ops, nested calls opened (their wrapper equations -- a nested
        # jit, custom_jvp_call -- are no ops): the one op count every view shows
        "traced_ops": sum(1 for e in traced.eqns if not e.is_call),
        "stablehlo_ops": stablehlo,
        "hlo_ops_before": count_instructions(pre_text) if pre_text is not None else None,
        "hlo_ops_after": post.instruction_count() if post is not None else None,
        "kernels": len(info.kernels) if info is not None else None,
        "scalar_kernels": (
            sum(1 for k in info.kernels if is_scalar_kernel(k)) if info is not None else None
        ),
        "eager_kernels": traced.eager_kernels,
        "eager_kernels_exact": traced.eager_exact,  # False: a lower bound (loops, shard_map)
    }
    if artifacts.backend == "tpu" and counts["scalar_kernels"]:
        notes.append(
            f"{counts['scalar_kernels']} of the {counts['kernels']} kernels are unfused ops on "
            "one-element values (e.g. the threefry fold-in of random-number streams, u32[1]): "
            "XLA:TPU runs them as scalar-unit instructions, not vector kernels; compare "
            f"{counts['kernels'] - counts['scalar_kernels']} kernels with the eager op count"
        )
    analytic = analytic_cost(traced.eqns)
    clock.lap("counts")
    analysis = Analysis(
        traced_graph=traced.graph,
        compiled_graph=info.graph if info is not None else None,
        fusions=info.fusions if info is not None else [],
        folded=folded,
        gradient=gradient,
        cost=cost,
        memory=memory,
        analytic=analytic,
        lines=lines,
        notes=notes,
        collectives=info.collectives if info is not None else [],
        counts=counts,
        kernel_costs=info.unit_costs if info is not None else {},
        located=located,
        sources=sources,
        kernel_sites=info.sites if info is not None else {},
        kernel_modules=info.modules if info is not None else {},
        kernel_functions=functions,
        shares_from=shares_from,
        call_kinds=kinds,
        timings=clock.timings,
        walk_order=[e.node.id for e in traced.eqns],
        loops=loops,
    )
    clock.lap("counts")
    return analysis
