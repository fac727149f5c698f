"""``--profile`` of long loops stays bounded (hostile round four): the per-iteration split is
one sweep over the events, the report and the strip carry at most ``MAX_BARS`` bars and
``layer[...]`` rows per loop, and the profiler's events are counted before it runs.

Before: the split compared every event with every iteration (a 10^4-iteration scan: minutes;
10^5: hours), the report carried every iteration and every kernel's time in each (and the view
drew one bar per iteration), ``layer[k]`` gave one row per element, and 20 calls of a
10^5-iteration loop asked JAX's profiler for 12 million events (about 2.8 KB each).
Structure, not timing: attribute reads, bars, rows, calls profiled, the error's code."""

from __future__ import annotations

import json

import jax.numpy as jnp
import pytest
from jax import lax

import nbcompile
import nbcompile.measure._loop_bounds as bounds
from nbcompile.analysis.calls import CallKinds
from nbcompile.analysis.loops import Loop
from nbcompile.errors import TargetError
from nbcompile.measure import profile
from nbcompile.measure._loops import LoopTime, layer_rows, loop_times
from nbcompile.measure._timeline import Span


def scan(n: int, **kw) -> Loop:
    fields = dict(
        index=0,
        kind="scan",
        line=6,
        location=None,
        group=None,
        trip_count=n,
        body_kernels=["add", "dot"],
        every_iteration=["add", "dot"],
        whiles=["while.1"],
    )
    fields.update(kw)
    return Loop(**fields)


class Counted(Span):
    """A span that counts how often its ``start`` and its ``name`` are read."""

    __slots__ = ()
    reads = 0
    names = 0

    def __getattribute__(self, name):
        if name == "start":
            Counted.reads += 1
        elif name == "name":
            Counted.names += 1
        return super().__getattribute__(name)


def long_call(n: int, slow: int | None = None) -> list[Span]:
    spans = [Span("while.1", 0, 40 * n + 10)]
    t = 5
    for i in range(n):
        dot = 100 if i == slow else 20
        spans.append(Counted("add", t, t + 5))
        spans.append(Counted("dot", t + 5, t + 5 + dot))
        t += 10 + dot
    spans[0] = Span("while.1", 0, t + 5)
    return spans


def test_the_iterations_are_split_in_one_sweep_over_the_events():
    n = 500
    spans = long_call(n)
    Counted.reads = 0
    (t,) = loop_times([scan(n)], [spans], frozenset({"while.1"}))
    assert len(t.iterations) == n and t.iterations[7] == pytest.approx(30e-9)
    # a few reads per event, not one per event per iteration (that was 2 x 500 x 500)
    assert Counted.reads < 20 * len(spans), Counted.reads


def test_each_loop_reads_only_its_own_kernels_events():
    """A program of 100 loops: the events are grouped by kernel once, not read once per loop."""
    loops, spans, t = [], [], 0
    for k in range(100):
        loops.append(scan(10, index=k, body_kernels=[f"k{k}"], every_iteration=[f"k{k}"]))
        loops[-1].whiles = [f"while.{k}"]
        spans.append(Counted(f"while.{k}", t, t + 200))
        for _ in range(10):
            spans.append(Counted(f"k{k}", t + 1, t + 19))
            t += 20
    Counted.names = 0
    times = loop_times(loops, [spans], frozenset(f"while.{k}" for k in range(100)))
    assert all(len(x.iterations) == 10 for x in times)
    assert Counted.names < 10 * len(spans), Counted.names  # was 2 x 100 loops x 1,100 events


def test_a_long_loop_comes_to_the_report_as_at_most_64_bars():
    n = 5000
    (t,) = loop_times([scan(n)], [long_call(n, slow=3001)], frozenset({"while.1"}))
    data = t.to_json()
    assert data["iteration_count"] == n and len(data["bars"]) <= bounds.MAX_BARS
    assert data["iterations"] is None and data["by_kernel"] is None and data["folded"]
    covered = [i for b in data["bars"] for i in range(b["first"], b["last"] + 1)]
    assert covered == list(range(n))  # every iteration in exactly one bar, in order
    slow = next(b for b in data["bars"] if b["first"] <= 3001 <= b["last"])
    assert slow["slowest_iteration"] == 3001 and slow["slowest"] == pytest.approx(110e-9)
    assert slow["slowest"] == max(b["slowest"] for b in data["bars"])
    assert all(b["slowest"] >= b["seconds"] * (1 - 1e-12) for b in data["bars"])  # float sums
    # the bars' means add up to the iterations' total
    total = sum(b["seconds"] * (b["last"] - b["first"] + 1) for b in data["bars"])
    assert total == pytest.approx(t.iteration_seconds)
    assert slow["kernels"][0][0] == "dot" and len(slow["kernels"]) <= 4
    assert len(json.dumps(data)) < 20_000


def test_a_short_loop_keeps_one_bar_per_iteration_and_every_figure():
    (t,) = loop_times([scan(6)], [long_call(6, slow=3)], frozenset({"while.1"}))
    data = t.to_json()
    assert [b["slowest"] for b in data["bars"]] == pytest.approx(t.iterations)
    assert [(b["first"], b["last"]) for b in data["bars"]] == [(k, k) for k in range(6)]
    assert data["iterations"] == t.iterations and data["folded"] is None
    assert set(data["by_kernel"]) == {"add", "dot"}


def test_layer_rows_of_a_long_scan_are_runs_of_elements():
    n = 1000
    loop = scan(n, group="f#1")
    t = LoopTime(loop, iterations=[1.0] * n, by_kernel={"dot": [1.0] * n})
    kinds = CallKinds({"f#1": "call", "layer#1": "call"})
    rows, covered = layer_rows([t], {"dot": 2.0}, {"dot": ["f#1/layer#1"]}, kinds)
    assert covered == {"dot"} and len(rows) <= bounds.MAX_BARS
    assert "f#1/layer[0:16]" in rows and sum(rows.values()) == pytest.approx(2.0)
    short = LoopTime(scan(3, group="f#1"), iterations=[1.0] * 3, by_kernel={"dot": [1.0] * 3})
    rows, _ = layer_rows([short], {"dot": 3.0}, {"dot": ["f#1/layer#1"]}, kinds)
    assert sorted(rows) == ["f#1/layer[0]", "f#1/layer[1]", "f#1/layer[2]"]


def test_kernel_executions_per_call_from_the_trip_counts():
    inner = scan(10, index=1, parent=0, body_kernels=["dot"], whiles=["while.2"])
    outer = scan(100, body_kernels=["add", "dot", "while.2"], nested=[inner])
    per, heaviest = bounds.executions_per_call([outer, inner], ["add", "dot", "while.2", "out"])
    assert per == 100 + 100 * 10 + 100 + 1 and heaviest is outer
    unrolled = scan(100, whiles=[])
    assert bounds.executions_per_call([unrolled], ["add", "dot"])[0] == 2
    dynamic = scan(None)
    assert bounds.executions_per_call([dynamic], ["add", "dot"]) == (None, dynamic)


# --- through the profiler -----------------------------------------------------------------
def long_scan(x, w):
    def body(c, _):
        return jnp.tanh(c @ w) + 0.1, c[0, 0]

    return lax.scan(body, x, None, length=100)


def data_dependent(x, w):
    n = (x[0, 1] * 0 + 100).astype(jnp.int32)
    return lax.fori_loop(0, n, lambda i, c: jnp.tanh(c @ w) + 0.1, x)


@pytest.fixture(scope="module")
def compiled():
    x, w = jnp.ones((64, 64)), jnp.eye(64) * 0.5
    return nbcompile.compile(long_scan, x, w), nbcompile.compile(data_dependent, x, w)


@pytest.mark.profiler
def test_fewer_calls_are_profiled_where_their_events_would_exceed_the_budget(compiled, monkeypatch):
    c, _ = compiled  # a call runs about 100 x 6 kernel executions
    monkeypatch.setattr(bounds, "EVENT_BUDGET", 3 * 600)
    p = profile(c, calls=20)
    assert 1 <= p.calls <= 3 and any("of the 20 calls asked for" in n for n in p.notes)
    assert len(p.loops[0].iterations) == 100


@pytest.mark.profiler
def test_a_call_over_the_limit_is_refused_naming_the_loop(compiled, monkeypatch):
    c, _ = compiled
    monkeypatch.setattr(bounds, "ONE_CALL_EVENTS", 300)
    with pytest.raises(TargetError) as err:
        profile(c, calls=20)
    assert err.value.code == "NBC620" and err.value.line == c.loops[0].line
    assert c.loops[0].label in str(err.value) and "--bench" in str(err.value)


@pytest.mark.profiler
def test_a_data_dependent_loop_is_counted_in_one_call_first(compiled, monkeypatch):
    _, c = compiled
    assert c.loops[0].trip_count is None
    monkeypatch.setattr(bounds, "EVENT_BUDGET", 900)  # a call here runs about 400
    p = profile(c, calls=20)
    assert p.calls == 2 and len(p.loops[0].iterations) == 100
    monkeypatch.setattr(bounds, "ONE_CALL_EVENTS", 300)
    with pytest.raises(TargetError) as err:
        profile(c, calls=20)
    assert err.value.code == "NBC620" and "counted in one profiled call" in str(err.value)
