"""``profile(c, calls=20)``: where the time of one call goes — per kernel, per line, per module.

Runs the compiled program ``calls`` times on its example arguments under JAX's profiler (after
warm-up calls, which are excluded), reads each kernel's execution from the trace
(:mod:`._xplane`), gives every instant of a call to the kernels running then (:mod:`._timeline`)
and maps each kernel to its fusion's source locations and module paths (:mod:`._kernels`).
Figures are medians over the calls, with the spread. A roofline puts each kernel's achieved
FLOP/s and bytes/s against the machine's peaks (:mod:`._peaks`): measured on a CPU, from the
datasheet on a GPU/TPU.

A program compiled for hardware that is not here (deviceless TPU topologies, GPU targets) cannot
run: the same table is then an **estimate** from XLA's cost model and the datasheet peaks.

    from nbcompile.measure import profile
    p = profile(nbcompile.compile(fn, *args), calls=20)
    p.step_seconds, p.kernels[0].name, p.by_line, p.coverage, p.text()
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from ..analysis.hlo import entry_instructions
from ..errors import TargetError
from ._calls import CallForm
from ._delta import ProfileDelta, profile_delta
from ._estimate import estimate
from ._kernels import CONTAINERS, kernels_of, module_name
from ._loop_bounds import executions_per_call, plan_calls
from ._loops import LoopTime, layer_rows, loop_times
from ._peaks import Peaks, cpu_peaks, spec_peaks, upper_bound
from ._result import (
    KernelTime,
    Profile,
    by_function,
    dtype_of,
    make_row,
    median,
    place_on_roof,
    quartiles,
    spread,
)
from ._timeline import Span, attribute, union_ns
from ._timing import Prepared
from ._xplane import CallRecord, capture

__all__ = ["KernelTime", "Profile", "ProfileDelta", "calibrate", "profile", "profile_delta"]


# --- measuring -----------------------------------------------------------------------------
def _clipped(record: CallRecord) -> list[Span]:
    # Everything is clipped to the call's window: a late completion marker must not make the
    # call's kernels outlast the call itself.
    return [
        Span(s.name, max(s.start, record.start), min(s.end, record.end), s.thread)
        for s in record.spans
        if s.start < record.end
    ]


def _per_call(record: CallRecord, containers: frozenset[str]) -> dict[str, Any]:
    spans = _clipped(record)
    shares = attribute(spans, containers)
    own: dict[str, list[tuple[int, int]]] = {}
    counts: dict[str, int] = {}
    for s in spans:
        own.setdefault(s.name, []).append((s.start, s.end))
        counts[s.name] = counts.get(s.name, 0) + 1
    kernel_union = union_ns((s.start, s.end) for s in spans)
    # An executor event can outlast the call (a pool thread recording its end late, after the
    # result was handed back): execution is over when the call's last kernel finishes.
    last = max(s.end for s in spans)
    clipped = [(max(a, record.start), min(b, last)) for a, b in record.busy if a < last]
    busy = union_ns([*clipped, *((s.start, s.end) for s in spans)])
    own_busy = {n: union_ns(iv) for n, iv in own.items()}
    work = [n for n in own_busy if n not in containers]
    return {
        "wall": record.wall,
        "busy": busy,
        "kernel_union": kernel_union,
        "shares": shares,
        "own": own_busy,
        "counts": counts,
        "overlap": sum(own_busy[n] for n in work) - kernel_union,
    }


def _call_once(c: Any) -> Callable[[], None] | Prepared:
    # the Compiled object itself: c.fn (the jax.jit object) would run jit's own compile, which
    # lacks any compiler_options this program was compiled with (e.g. an ablation variant)
    fn = c.compiled
    form = getattr(c, "call_form", None)
    if not isinstance(form, CallForm):
        form = CallForm.of(tuple(c.args), dict(getattr(c, "kwargs", None) or {}), lowered=c.lowered)

    def run(inputs: tuple[tuple[Any, ...], dict[str, Any]]) -> None:
        jax.block_until_ready(fn(*inputs[0], **inputs[1]))

    if form.donates:  # donated buffers are consumed: each call gets fresh copies, made outside
        return Prepared(form.fresh_dynamic, run)
    dynamic = form.dynamic()
    return lambda: run(dynamic)


def _warm(call: Callable[[], None] | Prepared) -> None:
    if isinstance(call, Prepared):
        call.run(call.prepare())
    else:
        call()


def _measure(c: Any, calls: int, warmup: int, roofline: bool) -> Profile:
    infos = kernels_of(c)
    call = _call_once(c)
    notes: list[str] = []
    # (the ENTRY computation's opcodes read from the text: no parse of the whole module)
    library = [n for n, op in entry_instructions(c.hlo or "") if op == "custom-call" and n in infos]
    module = module_name(c.hlo)
    program_loops = list(getattr(c.analysis, "loops", None) or [])
    per_call, heaviest = executions_per_call(program_loops, infos)
    counted, probe = per_call is None, None
    if counted:  # a loop with no static trip count: one warm-up call profiled alone, counted
        probe = capture(call, 1, set(infos), module, library)
        per_call = sum(len(r.spans) for r in probe.calls) + probe.outside
        warmup = max(warmup - 1, 0)
    asked = calls
    calls, fewer = plan_calls(asked, per_call, heaviest, counted)
    if fewer:
        notes.append(fewer)
    containers = frozenset(n for n, i in infos.items() if i.opcode in CONTAINERS)
    if probe is not None and calls == 1:  # the counted call is the one call: not run again
        trace = probe
    else:
        for _ in range(warmup):
            _warm(call)
        trace = capture(call, calls, set(infos), module, library)
    records = [r for r in trace.calls if any(s.start < r.end for s in r.spans)]
    measured = [_per_call(r, containers) for r in records]
    if not measured:
        raise TargetError(
            "the profiler recorded no kernel of this program",
            hint="the JAX profiler may not support this backend; use --bench for call times",
        )
    if len(measured) < len(trace.calls):
        notes.append(f"{len(trace.calls) - len(measured)} call(s) had no kernel events")
    if trace.outside:
        notes.append(f"{trace.outside} kernel event(s) fell outside every call window")
    if trace.unnamed_in_graphs:
        notes.append(
            f"{trace.unnamed_in_graphs} kernel launch(es) ran inside XLA's CUDA-graph command "
            "buffer naming no instruction of the program, in calls where their number was not "
            "one per library call (cuBLAS): their time is in the step, not in a kernel row"
        )
    ns = 1e-9
    walls = [p["wall"] * ns for p in measured]
    step = median(walls)
    names = sorted({n for p in measured for n in p["shares"]})
    rows = []
    for name in names:
        seconds = [p["shares"].get(name, 0.0) * ns for p in measured]
        busy = [p["own"].get(name, 0) * ns for p in measured]
        counts = [p["counts"].get(name, 0) for p in measured]
        rows.append(make_row(infos[name], seconds, busy, counts, step))
    peaks = None
    if roofline:
        peaks = _local_peaks(c, notes)
    for row in rows:
        place_on_roof(row, None, measured=True)  # the achieved rates, checked against the roof
    if peaks is not None:
        rates = [
            (r.name, r.achieved_flops_per_s or 0.0, r.achieved_bytes_per_s or 0.0, r.bytes)
            for r in rows
        ]
        peaks, checked = upper_bound(peaks, rates)  # re-measured, or refused, if beaten
        notes.extend(checked)
    for row in rows:
        place_on_roof(row, peaks, measured=True)
    rows.sort(key=lambda r: -r.seconds)
    by_line, by_cell, by_module, no_line = spread(rows, infos)
    loops, functions = _loops(c, records, containers, rows, infos)
    q25, q75 = quartiles(walls)
    # differences of medians over the same calls: exact, and >= 0 because per call
    # wall >= busy >= kernel union
    busy = median(p["busy"] * ns for p in measured)
    kernel_union = median(p["kernel_union"] * ns for p in measured)
    coverage = median(p["kernel_union"] / p["busy"] for p in measured if p["busy"])
    return Profile(
        source="measured",
        step_seconds=step,
        kernels=rows,
        by_line=by_line,
        by_cell_line=by_cell,
        by_module=by_module,
        by_function=functions,
        loops=loops,
        coverage=coverage,
        peaks=peaks,
        calls=len(measured),
        warmup=warmup,
        step_q25=q25,
        step_q75=q75,
        execution_seconds=busy,
        unattributed_seconds=busy - kernel_union,
        dispatch_seconds=step - busy,
        kernel_union_seconds=kernel_union,
        overlap_seconds=median(p["overlap"] * ns for p in measured),
        no_line_seconds=no_line,
        where=trace.where,
        method="jax.profiler trace, kernel events by HLO name",
        notes=notes,
    )


def _loops(
    c: Any,
    records: list[CallRecord],
    containers: frozenset[str],
    rows: list[KernelTime],
    infos: dict[str, Any],
) -> tuple[list[LoopTime], dict[str, float]]:
    """Per-iteration time of every loop, and ``by_function`` with the kernels of a scan over
    the user's function given to its ``layer[k]`` rows (``_loops.layer_rows``)."""
    analysis = c.analysis
    loops = list(getattr(analysis, "loops", None) or [])
    if not loops:
        return [], by_function(rows, infos)
    times = loop_times(loops, [_clipped(r) for r in records], containers)
    seconds = {r.name: r.seconds for r in rows}
    kinds = getattr(analysis, "call_kinds", None)
    functions = getattr(analysis, "kernel_functions", {}) or {}
    layers, covered = layer_rows(times, seconds, functions, kinds) if kinds else ({}, set())
    out = by_function([r for r in rows if r.name not in covered], infos)
    out.update(layers)
    return times, out


def _local_peaks(c: Any, notes: list[str]) -> Peaks | None:
    platform = c.backend
    if platform == "cpu":
        return cpu_peaks()[0]
    kind = jax.devices(platform)[0].device_kind
    peaks = spec_peaks(platform, kind, dtype_of(c))
    if peaks is None:
        notes.append(f"no datasheet peaks for {kind!r}: no roofline")
    return peaks


# --- the public entry point ----------------------------------------------------------------
def _present(c: Any) -> bool:
    """Whether ``c``'s program can run here (not compiled deviceless for absent hardware)."""
    target = getattr(c, "target", None)
    present = getattr(target, "present", None)
    if isinstance(present, bool):
        return present
    try:
        return bool(jax.devices(c.backend))
    except RuntimeError:  # documented: no such backend in this process
        return False


def _abstract(c: Any) -> list[str]:
    """The user's names of the example arguments that are shapes only (``ShapeDtypeStruct``)."""

    def shapes_only(value: Any) -> bool:
        return any(isinstance(leaf, jax.ShapeDtypeStruct) for leaf in jax.tree.leaves(value))

    signature = list(getattr(c, "signature", None) or [])  # "name: f32[4,3]" per argument
    names = [
        signature[i].split(":", 1)[0] if i < len(signature) else f"arg{i}"
        for i, a in enumerate(c.args)
        if shapes_only(a)
    ]
    kwargs = getattr(c, "kwargs", None) or {}
    return names + [k for k, v in kwargs.items() if shapes_only(v)]


def profile(c: Any, calls: int = 20, *, warmup: int = 1, roofline: bool = True) -> Profile:
    """Where the time of one call of ``c`` (a :class:`nbcompile.Compilation`) goes.

    Calls the compiled program ``warmup`` times (not measured), then ``calls`` times under JAX's
    profiler, and returns per-kernel / per-line / per-module medians (``source="measured"``).
    For a program compiled for hardware that is not here the figures are an estimate from XLA's
    cost model and datasheet peaks (``source="estimate"``). ``roofline=False`` skips the peaks
    (on a CPU: the one-off calibration, about a second, cached per machine).

    Raises :class:`nbcompile.errors.TargetError` ``NBC210`` when there is nothing to run or
    estimate (no compiled program, or example arguments that are shapes only:
    ``jax.ShapeDtypeStruct``), ``NBC600`` when JAX's profiler cannot start in this process.
    """
    if calls < 1 or warmup < 0:
        raise ValueError(f"calls must be >= 1 and warmup >= 0 (got {calls}, {warmup})")
    label = getattr(getattr(c, "target", None), "label", None) or c.backend
    if c.compiled is None or c.hlo is None:
        raise TargetError(
            f"nothing to profile: no compiled program for {label} (lowered only)",
            code="NBC210",
            hint="install the backend's JAX plugin to compile for it, or profile on this machine",
        )
    if not _present(c):
        return estimate(c, kernels_of(c), label)
    names = _abstract(c)
    if names:
        verb = "is" if len(names) == 1 else "are"
        raise TargetError(
            f"cannot profile: {', '.join(names)} {verb} only a shape (jax.ShapeDtypeStruct), "
            "so there is nothing to run",
            code="NBC210",
            hint="compile with real arrays as example arguments to measure time; shapes only "
            "suit compile-only planning (--memory, the compiled graph)",
        )
    return _measure(c, calls, warmup, roofline)


def calibrate(refresh: bool = False) -> Peaks:
    """This CPU's roofline peaks: measured once per machine (about two seconds) and cached
    under the user cache folder; ``refresh=True`` measures again and keeps, figure by figure,
    the higher of the two measurements (a peak is an upper bound: a busy machine measures it
    low). ``Peaks.bandwidths`` holds the bandwidth over an array that fits each cache level."""
    return cpu_peaks(refresh=refresh)[0]
