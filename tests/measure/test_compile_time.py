"""``c.compile_time``: measured trace / lower / XLA / codegen seconds, equations by line and the
advice for a Python loop unrolled at trace time (nbcompile/analysis/compile_time.py)."""

from __future__ import annotations

import pytest

from nbcompile.analysis.compile_time import compile_time, enclosing_loop, loop_advice

from ._metal_cell import LOOP_LINE, compiled


@pytest.fixture
def comp(shell):
    return compiled(shell)


def _at(by_line, line):
    return sum(v for loc, v in by_line.items() if loc.line == line)


def test_the_loop_line_holds_its_unrolled_equations_and_gets_advice(comp):
    ct = comp.compile_time
    assert _at(ct.eqns_by_line, LOOP_LINE) >= 72  # 24 x (tanh, mul, add)
    assert sum(ct.eqns_by_line.values()) == sum(
        1 for n in comp.graph.nodes if n.kind == "op" and n.location is not None
    )
    [(text, location, share)] = ct.advice
    assert location.line == LOOP_LINE and share >= 0.7
    assert "lax.scan" in text and f"{share:.0%}" in text
    assert f"loop of line {LOOP_LINE - 1}, unrolled 24×" in text


def test_the_parts_add_up_to_the_measured_compile(comp):
    ct = comp.compile_time
    stages = comp.stages
    xla = stages.timings["compile"] if stages.xla_compiles else comp._metal.seconds
    measured = stages.timings["trace"] + stages.timings["lower"] + xla
    parts = ct.trace + ct.lower + ct.xla + ct.codegen
    assert min(ct.trace, ct.lower, ct.xla, ct.codegen) >= 0
    assert abs(parts - measured) <= 0.1 * measured
    assert ct.total == pytest.approx(parts)
    assert sum(ct.by_line.values()) == pytest.approx(ct.trace)
    assert set(ct.by_pipeline) <= {s.pipeline for s in comp.passes.steps}


def test_no_advice_without_a_dominant_line_and_no_split_without_a_pass_log():
    assert loop_advice({"a": 30, "b": 30, "c": 40}) == []
    assert loop_advice({"a": 5, "b": 1}) == []  # too few equations to matter
    ct = compile_time(
        trace=0.1, lower=0.05, compile_seconds=1.0, passes_share=None, by_pipeline=None, eqns={}
    )
    assert ct.xla is None and ct.codegen is None and ct.total == pytest.approx(1.15)


def test_the_enclosing_loop_is_read_from_the_source(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(
        "def f(h, n):\n"
        "    for _ in range(12):\n"
        "        h = h * 2\n"
        "    while n:\n"
        "        for k in range(n):\n"
        "            h = h + k\n"
        "    return h\n"
    )
    assert enclosing_loop(str(path), 3) == (2, 12)
    assert enclosing_loop(str(path), 6) == (5, None)  # range(n): not a number
    assert enclosing_loop(str(path), 7) is None
    assert enclosing_loop(str(tmp_path / "missing.py"), 1) is None


def test_a_persistent_cache_hit_is_timed_by_the_dumped_compile(comp):
    """When JAX's persistent cache served the program, its compile time says nothing about XLA:
    the dumped compile (cache off) is the measured XLA compile, and a note says so."""
    from types import SimpleNamespace

    from nbcompile.measure.metal import measured_compile_time

    stages = SimpleNamespace(timings={"trace": 0.2, "lower": 0.1, "compile": 0.001}, xla_compiles=0)
    served = SimpleNamespace(stages=stages, graph=comp.graph)
    ct = measured_compile_time(served, comp._metal)
    assert ct.xla + ct.codegen == pytest.approx(comp._metal.seconds)
    assert ct.total == pytest.approx(0.3 + comp._metal.seconds)
    assert "persistent cache" in ct.notes[0]
