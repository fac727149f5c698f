"""The profile's pure parts on hand-made inputs: time attribution, trace reading, roofline,
peaks (table and cache) and deltas. No profiler runs here."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from nbcompile.measure import _peaks
from nbcompile.measure._delta import profile_delta
from nbcompile.measure._kernels import KernelInfo, module_name
from nbcompile.measure._peaks import GPU_SPECS, TPU_SPECS, Peak, Peaks, spec_peaks
from nbcompile.measure._result import KernelTime, Profile, place_on_roof, spread
from nbcompile.measure._timeline import Span, attribute, union_ns
from nbcompile.measure._xplane import MARKER, extract


# --- timeline ------------------------------------------------------------------------------
def test_union_merges_overlaps_and_nesting():
    assert union_ns([(0, 10), (5, 20), (30, 40), (32, 35)]) == 30
    assert union_ns([]) == 0


def test_attribute_splits_overlap_evenly_and_sums_to_the_union():
    spans = [Span("a", 0, 100), Span("b", 50, 150), Span("c", 200, 210)]
    got = attribute(spans)
    assert got == {"a": 75.0, "b": 75.0, "c": 10.0}
    assert sum(got.values()) == union_ns((s.start, s.end) for s in spans)


def test_attribute_gives_a_loop_only_the_time_its_body_is_idle():
    spans = [Span("while.1", 0, 100), Span("body", 10, 40), Span("body", 50, 90)]
    got = attribute(spans, containers=frozenset({"while.1"}))
    assert got == {"while.1": 30.0, "body": 70.0}
    # without knowing it is a loop, the overlap would be split: the container flag matters
    assert attribute(spans)["while.1"] == 65.0


def test_back_to_back_kernels_do_not_overlap():
    assert attribute([Span("a", 0, 10), Span("b", 10, 20)]) == {"a": 10.0, "b": 10.0}


# --- reading a trace -----------------------------------------------------------------------
@dataclass
class Ev:
    name: str
    start_ns: int
    end_ns: int
    stats: list = field(default_factory=list)


@dataclass
class Line:
    name: str
    events: list


@dataclass
class Plane:
    name: str
    lines: list


@dataclass
class Space:
    planes: list


def _kernel(name: str, start: int, end: int, run: int, module: str = "jit_f") -> Ev:
    return Ev(name, start, end, [("hlo_op", name), ("hlo_module", module), ("run_id", run)])


def test_extract_groups_by_call_and_closes_async_kernels_at_their_end_marker():
    main = Line("python", [Ev(MARKER, 0, 1000), Ev(MARKER, 2000, 3000)])
    client = Line(
        "tf_XLAPjRtCpuClient/1",
        [
            Ev("ThunkExecutor::Execute", 10, 990),
            _kernel("dot.1", 10, 50, run=7),  # async: returns early ...
            Ev("end: dot.1", 400, 401),  # ... and completes here
            _kernel("fusion.2", 2010, 2100, run=8),
            Ev("end: fusion.2", 2100, 2101),
            _kernel("fusion.2", 3500, 3600, run=9),  # outside every call window
            _kernel("other.1", 2200, 2300, run=8, module="jit_g"),  # another program
        ],
    )
    trace = extract(
        Space([Plane("/host:CPU", [main, client])]), {"dot.1", "fusion.2", "other.1"}, "jit_f"
    )
    assert [len(c.spans) for c in trace.calls] == [1, 1]
    assert trace.calls[0].spans[0].end == 401  # extended to its completion
    assert trace.calls[0].busy == [(10, 990)]
    assert trace.outside == 1 and trace.other_modules == 1
    assert trace.where == "host threads"


def test_a_late_end_marker_never_stretches_past_the_threads_next_kernel():
    line = Line(
        "t/1",
        [
            _kernel("a", 0, 10, run=1),
            _kernel("b", 12, 50, run=1),
            Ev("end: a", 60, 61),
            Ev("end: b", 50, 51),
        ],
    )
    space = Space([Plane("/host:CPU", [Line("python", [Ev(MARKER, 0, 100)]), line])])
    spans = {s.name: s for s in extract(space, {"a", "b"}, None).calls[0].spans}
    assert spans["a"].end == 12 and spans["b"].end == 51


def test_device_kernels_win_over_host_events_of_the_same_name():
    host = Plane(
        "/host:CPU", [Line("python", [Ev(MARKER, 0, 100)]), Line("t", [Ev("fusion.1", 5, 6)])]
    )
    device = Plane(
        "/device:GPU:0",
        [
            Line(
                "Stream #1",
                [
                    Ev(
                        "loop_fusion_kernel",
                        20,
                        60,
                        [("hlo_op", "fusion.1"), ("hlo_module", "jit_f")],
                    ),
                    Ev("MemcpyD2D", 60, 70, []),
                ],
            )
        ],
    )
    trace = extract(Space([host, device]), {"fusion.1"}, "jit_f")
    (call,) = trace.calls
    assert [(s.name, s.start, s.end) for s in call.spans] == [("fusion.1", 20, 60)]
    assert call.busy == [(60, 70)] and trace.where == "/device:GPU:0"


def test_device_summary_lines_do_not_count_a_kernel_twice():
    stats = [("hlo_op", "fusion.1"), ("hlo_module", "jit_f")]
    gpu = Plane(
        "/device:GPU:0",
        [
            Line("Stream #7(Compute)", [Ev("loop_fusion", 20, 60, stats)]),
            Line("XLA Ops", [Ev("fusion.1", 19, 61, stats)]),  # a summary of the same kernel
        ],
    )
    tpu = Plane(
        "/device:TPU:0",
        [
            Line("XLA Modules", [Ev("jit_f", 10, 90, [])]),
            Line("XLA Ops", [Ev("fusion.1", 20, 60, stats)]),
        ],
    )
    host = Plane("/host:CPU", [Line("python", [Ev(MARKER, 0, 100)])])
    for device in (gpu, tpu):
        (call,) = extract(Space([host, device]), {"fusion.1"}, "jit_f").calls
        assert [(s.start, s.end) for s in call.spans] == [(20, 60)], device.name


def test_module_name_reads_the_hlo_header():
    assert module_name("HloModule jit_block, is_scheduled=true\n") == "jit_block"
    assert module_name(None) is None


# --- roofline and peaks ----------------------------------------------------------------------
PEAKS = Peaks("test", Peak(100e9, "measured", "t"), Peak(10e9, "measured", "t"))


def _row(flops, nbytes, busy=1e-3, **kw) -> KernelTime:
    return KernelTime(
        name="k",
        opcode="fusion",
        seconds=busy,
        share=1.0,
        busy_seconds=busy,
        count=1,
        flops=flops,
        bytes=nbytes,
        **kw,
    )


def test_roofline_classifies_by_intensity_against_the_ridge():
    assert PEAKS.ridge == 10.0
    dot = _row(50e6, 1e6)  # intensity 50 > ridge 10: compute-bound
    place_on_roof(dot, PEAKS, measured=True)
    assert dot.bound == "compute" and dot.intensity == 50.0
    assert dot.achieved_flops_per_s == pytest.approx(50e9)
    assert dot.roof_fraction == pytest.approx(0.5)
    add = _row(1e6, 4e6)  # intensity 0.25: memory-bound; roof 2.5 GFLOP/s
    place_on_roof(add, PEAKS, measured=True)
    assert add.bound == "memory" and add.roof_fraction == pytest.approx(1e9 / 2.5e9)
    copy = _row(0.0, 5e6)
    place_on_roof(copy, PEAKS, measured=True)
    assert copy.bound == "memory" and copy.roof_fraction == pytest.approx(5e9 / 10e9)
    unknown = _row(None, 4e6)
    place_on_roof(unknown, PEAKS, measured=True)
    assert unknown.bound is None and unknown.roof_fraction is None


def test_estimated_rows_are_classified_but_have_no_achieved_rate():
    row = _row(50e6, 1e6)
    place_on_roof(row, PEAKS, measured=False)
    assert row.bound == "compute" and row.achieved_flops_per_s is None


def test_spec_tables_name_their_source_and_agree_with_the_gpu_targets():
    from nbcompile.targets._gpu_configs import GPU_TARGETS

    for name, (f32, bf16, bw, source) in GPU_SPECS.items():
        assert bf16 >= f32 > 1e12 and "datasheet" in source
        assert bw == GPU_TARGETS[name].memory_bandwidth  # one set of figures for both uses
    for f, bw, source in TPU_SPECS.values():
        assert f > 1e14 and bw > 5e11 and "documentation" in source
    p = spec_peaks("gpu", "NVIDIA H100 80GB HBM3", "bf16")
    assert p.flops_per_s.value == GPU_SPECS["h100"][1] and p.flops_per_s.source == "spec"
    assert spec_peaks("tpu", "TPU v5 lite").device == "TPU v5e"
    assert spec_peaks("tpu", "v5p:2x2x1").device == "TPU v5p"
    assert spec_peaks("tpu", "TPU v6 lite").device == "TPU v6e"
    assert spec_peaks("gpu", "Some Other GPU") is None


def test_cpu_peaks_are_measured_once_and_read_back_from_json(tmp_path, monkeypatch):
    monkeypatch.setenv("NBCOMPILE_CACHE_DIR", str(tmp_path))
    calls = []

    def fake_measure(patience=1.0):
        calls.append(patience)
        return {
            "version": _peaks._VERSION,
            "cpu": "X",
            "cores": 2,
            "flops_per_s": 3e10,
            "bytes_per_s": 2e10,
            "seconds": 0.5,
            "load": 0.1,
            "measured_at": "2026-01-01T00:00:00",
        }

    monkeypatch.setattr(_peaks, "_measure_cpu", fake_measure)
    _, raw = _peaks.cpu_peaks()
    second, raw2 = _peaks.cpu_peaks()
    assert calls == [1.0] and not raw["cached"] and raw2["cached"]
    assert second.flops_per_s.value == 3e10 and second.flops_per_s.source == "measured"
    (path,) = tmp_path.glob("peaks/*.json")
    assert json.loads(path.read_text())["bytes_per_s"] == 2e10
    path.write_text("{not json")  # a damaged cache file is measured again, not trusted
    _peaks.cpu_peaks()
    assert calls == [1, 1]
    _peaks.cpu_peaks(refresh=True)
    assert calls == [1, 1, 1]


# --- per-line spread and deltas ------------------------------------------------------------
def _profile(rows: dict[str, float], infos: dict[str, KernelInfo], step: float) -> Profile:
    kernels = [
        KernelTime(name=n, opcode="fusion", seconds=s, share=s / step, busy_seconds=s, count=1)
        for n, s in rows.items()
    ]
    by_line, by_cell, by_module, no_line = spread(kernels, infos)
    return Profile(
        "measured", step, kernels, by_line, by_cell, by_module, 1.0, None, no_line_seconds=no_line
    )


INFOS = {
    "dot.1": KernelInfo(
        "dot.1", "dot", locations=[("cell", 3)], cell_lines=[3], modules=["MLP/dense"]
    ),
    "fusion.2": KernelInfo(
        "fusion.2",
        "fusion",
        locations=[("cell", 4), ("cell", 5)],
        cell_lines=[4, 5],
        modules=["MLP"],
    ),
    "copy.3": KernelInfo("copy.3", "copy"),
}


def test_spread_shares_a_kernel_evenly_between_its_lines():
    p = _profile({"dot.1": 8.0, "fusion.2": 2.0, "copy.3": 0.5}, INFOS, 11.0)
    assert p.by_line == {("cell", 3): 8.0, ("cell", 4): 1.0, ("cell", 5): 1.0}
    assert p.by_cell_line == {3: 8.0, 4: 1.0, 5: 1.0}
    assert p.by_module == {"MLP/dense": 8.0, "MLP": 2.0}
    assert p.no_line_seconds == 0.5


def test_profile_delta_per_line_and_kernel():
    before = _profile({"dot.1": 8.0, "fusion.2": 2.0}, INFOS, 10.5)
    after = _profile({"dot.1": 2.0, "copy.3": 1.0}, INFOS, 3.5)
    d = profile_delta(before, after)
    assert d.step_delta == -7.0 and d.speedup == 3.0
    assert d.by_line[0] == (("cell", 3), 8.0, 2.0, -6.0)
    assert {k: delta for k, _, _, delta in d.kernels} == {
        "dot.1": -6.0,
        "fusion.2": -2.0,
        "copy.3": 1.0,
    }
    assert any("one side only" in n for n in d.notes)
    data = json.loads(json.dumps(d.to_json()))
    assert data["by_line"][0]["location"] == ["cell", 3] and "faster" in d.text()


def _fake_record(flops: float, bw: float, levels: list, at: str) -> dict:
    return {
        "version": _peaks._VERSION,
        "cpu": "X",
        "cores": 2,
        "flops_per_s": flops,
        "bytes_per_s": bw,
        "bandwidths": levels,
        "stream_bytes": 1 << 26,
        "seconds": 0.5,
        "load": 0.1,
        "measured_at": at,
    }


def test_a_measurement_never_lowers_a_cached_peak(tmp_path, monkeypatch):
    """A peak is an upper bound: measured again on a busier machine, each figure keeps the
    higher of the two measurements (and says when it was measured)."""
    monkeypatch.setenv("NBCOMPILE_CACHE_DIR", str(tmp_path))
    runs = iter(
        [
            _fake_record(3e10, 1e10, [[1 << 16, 9e10], [1 << 25, 1e10]], "first"),
            _fake_record(2e10, 2e10, [[1 << 16, 5e10], [1 << 25, 2e10]], "second"),
        ]
    )
    monkeypatch.setattr(_peaks, "_measure_cpu", lambda patience=1.0: next(runs))
    _peaks.cpu_peaks()
    merged, raw = _peaks.cpu_peaks(refresh=True)
    assert merged.flops_per_s.value == 3e10 and "measured first" in merged.flops_per_s.detail
    assert merged.bytes_per_s.value == 2e10 and "measured second" in merged.bytes_per_s.detail
    assert merged.bandwidths == ((1 << 16, 9e10), (1 << 25, 2e10))
    assert raw["measurements"] == 2 and "highest of 2" in merged.flops_per_s.detail


def test_the_bandwidth_roof_of_a_kernel_is_that_of_its_working_set():
    levels = ((1 << 16, 200e9), (1 << 21, 150e9), (1 << 25, 100e9))  # L1, L2, L3 capacities
    p = Peaks("t", Peak(100e9, "measured", "t"), Peak(20e9, "measured", "t"), "f32", levels)
    assert p.bandwidth_for(None) == 20e9 == p.bandwidth_for(1 << 30)  # past the caches
    assert p.bandwidth_for(3 << 20) == 100e9  # does not fit L2, fits L3: L3's bandwidth
    assert p.bandwidth_for(1 << 20) == 150e9 and p.bandwidth_for(1 << 10) == 200e9
    assert p.ridge_for(3 << 20) == pytest.approx(1.0) and p.ridge == 5.0
    add = _row(1e6, 4e6)  # 4 MB, 0.25 FLOP/byte: in L3, bounded by its 100 GB/s
    place_on_roof(add, p, measured=True)
    assert add.bound == "memory" and add.roof_fraction == pytest.approx(1e9 / (0.25 * 100e9))


def test_a_kernel_that_beats_its_roof_has_it_measured_again_then_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("NBCOMPILE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_peaks, "_refused", None)
    low = _fake_record(1e10, 1e10, [], "busy")
    high = _fake_record(5e10, 1e10, [], "quiet")
    runs = iter([low, high, low, low, low])
    patience = []

    def measure(p=1.0):
        patience.append(p)
        return next(runs)

    monkeypatch.setattr(_peaks, "_measure_cpu", measure)
    peaks = _peaks.cpu_peaks()[0]
    kernel = [("dot.1", 3e10, 1e9, 1e6)]  # 3x the FLOP/s peak measured on a busy machine
    assert _peaks.upper_bound(peaks, [("ok", 1e10, 1e9, 1e6)]) == (peaks, [])
    again, notes = _peaks.upper_bound(peaks, kernel)  # measured again: 5e10 bounds it
    assert again.flops_per_s.value == 5e10 and "measured again" in notes[0]
    faster = [("dot.1", 9e10, 1e9, 1e6)]  # beats even the higher figure: refused
    refused, notes = _peaks.upper_bound(again, faster)
    assert refused is None and notes[-1].startswith("refused: dot.1")
    # each try measures for longer than the last: more chances of a quiet moment
    assert patience == [1.0, 1.0, 1.0, 2.0, 4.0]
    # a re-run soon after is refused at once, against the peaks it was refused with: the
    # three measurements just made are this machine's state (each costs seconds)
    cached = _peaks.cpu_peaks()[0]
    again_refused, notes = _peaks.upper_bound(cached, faster)
    assert again_refused is None and patience == [1.0, 1.0, 1.0, 2.0, 4.0]
    assert notes[0].startswith("refused: dot.1") and "s ago in this session" in notes[0]
    # ... but another kernel beating them is measured again (its own three tries)
    runs = iter([low, low, low])
    other = [("dot.2", 9e10, 1e9, 2e6)]
    assert _peaks.upper_bound(cached, other)[0] is None and len(patience) == 8
    assert _peaks.upper_bound(cached, other)[0] is None and len(patience) == 8  # then at once
    # a kernel of either refusal, beside a new one, refuses them at once
    both, notes = _peaks.upper_bound(cached, [("dot.3", 9e10, 1e9, 3e6), *faster])
    assert both is None and len(patience) == 8 and notes[0].startswith("refused: dot.1")
    # ... and so is the same kernel once that time has passed
    monkeypatch.setattr(_peaks, "REFUSED_FOR", 0.0)
    runs = iter([low, low, low])
    assert _peaks.upper_bound(cached, other)[0] is None and len(patience) == 11
    spec = spec_peaks("tpu", "v5e")
    assert _peaks.upper_bound(spec, faster) == (spec, [])  # a datasheet is not re-measured
