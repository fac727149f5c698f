"""The per-iteration split on made-up profiler spans (``measure/_loops.py``): exact figures."""

from __future__ import annotations

import pytest

from nbcompile.analysis.calls import CallKinds
from nbcompile.analysis.loops import Loop
from nbcompile.measure._loops import layer_rows, loop_times
from nbcompile.measure._timeline import Span

CONTAINERS = frozenset({"while.1", "cond.1"})


def scan(**kw) -> Loop:
    fields = dict(
        index=0,
        kind="scan",
        line=6,
        location=None,
        group=None,
        trip_count=3,
        body_kernels=["add", "dot", "heavy"],
        every_iteration=["add", "dot"],
        whiles=["while.1"],
    )
    fields.update(kw)
    return Loop(**fields)


def call(offset: int, while_end: int) -> list[Span]:
    """One call: a while event (ending at ``while_end``: XLA:CPU may end it early) around
    three iterations of add + dot; iteration 1 also runs ``heavy`` in a branch."""
    spans = [Span("while.1", offset, offset + while_end)]
    t = offset + 10
    for i in range(3):
        spans.append(Span("add", t, t + 5))
        spans.append(Span("dot", t + 5, t + 25))
        t += 30
        if i == 1:
            spans.append(Span("cond.1", t, t + 100))
            spans.append(Span("heavy", t, t + 100))
            t += 100
        t += 5
    return spans


def test_iterations_start_at_the_body_kernels_and_run_to_the_next():
    (t,) = loop_times([scan()], [call(0, 200), call(1000, 200)], CONTAINERS)
    # iteration starts: 10, 45, 180; the run ends with its last kernel (205), not before
    assert t.iterations == pytest.approx([35e-9, 135e-9, 25e-9])
    assert t.total_seconds == pytest.approx(205e-9) and t.runs == 1.0
    assert t.by_kernel["heavy"] == pytest.approx([0.0, 100e-9, 0.0])
    assert t.by_kernel["dot"] == pytest.approx([20e-9] * 3)
    assert "cond.1" not in t.by_kernel and "while.1" not in t.by_kernel
    for i in range(3):  # per run the kernels' shares never exceed their iteration
        assert sum(v[i] for v in t.by_kernel.values()) <= t.iterations[i] + 1e-15


def test_a_while_event_that_ends_early_keeps_its_kernels():
    (t,) = loop_times([scan()], [call(0, 40)], CONTAINERS)  # event ends in iteration 0
    assert len(t.iterations) == 3 and t.total_seconds == pytest.approx(205e-9)


def test_inner_loop_runs_are_told_apart_by_their_while_events():
    inner = scan(
        index=1,
        parent=0,
        trip_count=2,
        body_kernels=["x"],
        every_iteration=["x"],
        whiles=["while.2"],
    )
    spans = []
    for r in range(3):  # three runs of a 2-iteration inner loop, 100 ns apart
        base = r * 100
        spans += [
            Span("while.2", base, base + 50),
            Span("x", base + 5, base + 15),
            Span("x", base + 25, base + 45),
        ]
    (t,) = loop_times([inner], [spans], frozenset({"while.2"}))
    assert t.runs == 3.0 and t.iterations == pytest.approx([20e-9, 25e-9])
    assert t.total_seconds == pytest.approx(150e-9)


def test_no_loop_left_gives_the_total_and_says_so():
    gone = scan(whiles=[], changes=["unrolled by JAX (unroll=3): no loop in the program"])
    (t,) = loop_times([gone], [[Span("add", 0, 10), Span("dot", 10, 40)]], CONTAINERS)
    assert t.iterations == [] and t.total_seconds == pytest.approx(40e-9)
    assert "no per-iteration events" in t.note and "unroll=3" in t.note


def test_layer_rows_name_the_function_and_the_element():
    kinds = CallKinds({"body#1": "call", "layer#1": "call", "tanh": "library"})
    fwd = scan(trip_count=3)
    bwd = scan(index=1, reverse=True, phase="backward")
    (tf,) = loop_times([fwd], [call(0, 300)], CONTAINERS)
    (tb,) = loop_times([bwd], [call(0, 300)], CONTAINERS)
    functions = {
        "dot": ["body#1/layer#1"],
        "add": ["body#1/layer#1/tanh"],
        "heavy": ["body#1 (backward)/layer#1 (backward)"],
    }
    seconds = {"dot": 60e-9, "add": 15e-9, "heavy": 100e-9}
    rows, covered = layer_rows([tf], seconds, functions, kinds)
    assert covered == {"dot", "add", "heavy"}
    assert set(rows) == {"layer[0]", "layer[1]", "layer[2]", "layer[1] (backward)"}
    assert sum(rows.values()) == pytest.approx(sum(seconds.values()))
    # a reverse scan's first iteration is its last element
    rows, _ = layer_rows([tb], {"heavy": 100e-9}, {"heavy": functions["heavy"]}, kinds)
    assert rows == {"layer[1] (backward)": pytest.approx(100e-9)}
    rows, _ = layer_rows([tb], {"dot": 60e-9}, {"dot": ["body#1/layer#1"]}, kinds)
    assert rows["layer[2]"] == pytest.approx(20e-9)  # ran first: element 2
