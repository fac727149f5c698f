"""``c.passes``: XLA's pass pipeline read back from XLA's own dump (nbcompile/analysis/
passes_log.py), through ``%%compile --passes`` in a real IPython shell, and the reader on
files written by hand."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest

from nbcompile.analysis.hlo import count_opcodes, entry_instructions, parse_hlo
from nbcompile.analysis.passes_log import read_pass_log, unified_diff

from ._metal_cell import compiled


@pytest.fixture
def comp(shell):
    return compiled(shell)


def test_a_fusion_pass_changed_the_module_and_raised_the_fusion_count(comp):
    steps = comp.passes.steps
    assert [s.index for s in steps] == list(range(len(steps)))
    raised = [
        s
        for s in steps
        if "fusion" in s.name and s.changed and s.index and s.fusions > steps[s.index - 1].fusions
    ]
    assert raised, comp.passes.text()
    step = raised[0]
    assert step.added.get("fusion", 0) >= 1
    diff = comp.passes.diff(step.index)
    added = [line for line in diff.splitlines() if line.startswith("+") and " fusion(" in line]
    assert added, diff


def test_counts_after_the_last_pass_are_the_optimised_modules(comp):
    last = comp.passes.steps[-1]
    module = parse_hlo(comp.hlo)
    ops = [i.opcode for c in module.computations.values() for i in c.instructions]
    assert last.instructions == module.instruction_count() == len(ops)
    assert last.fusions == ops.count("fusion")
    assert parse_hlo(comp.passes.hlo(-1)).instruction_count() == last.instructions


def test_steps_are_xlas_order_with_texts_and_no_invented_timings(comp):
    log = comp.passes
    assert all(s.seconds is None for s in log.steps)  # XLA writes no per-pass time here
    assert any(s.name == "pipeline-start" for s in log.steps)
    unchanged = next(s for s in log.steps if not s.changed)
    assert log.diff(unchanged.index) == ""
    assert log.hlo(0).startswith("HloModule")
    with pytest.raises(IndexError):
        log.hlo(len(log))
    assert set(log.by_pipeline) <= {s.pipeline for s in log.steps}
    assert all(seconds >= 0 for seconds in log.by_pipeline.values())


HEAD = """HloModule jit_g, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

"""
UNFUSED = (
    HEAD
    + """ENTRY %main.4 (x.1: f32[4]) -> f32[4] {
  %x.1 = f32[4]{0} parameter(0)
  %sine.2 = f32[4]{0} sine(%x.1)
  ROOT %cosine.3 = f32[4]{0} cosine(%sine.2)
}
"""
)
FUSED = (
    HEAD
    + """%fused_computation (param_0: f32[4]) -> f32[4] {
  %param_0 = f32[4]{0} parameter(0)
  %sine.0 = f32[4]{0} sine(%param_0)
  ROOT %cosine.0 = f32[4]{0} cosine(%sine.0)
}

ENTRY %main.4 (x.1: f32[4]) -> f32[4] {
  %x.1 = f32[4]{0} parameter(0)
  ROOT %fusion = f32[4]{0} fusion(%x.1), kind=kLoop, calls=%fused_computation
}
"""
)


def test_the_reader_turns_dump_files_into_steps(tmp_path):
    unfused, fused = UNFUSED, FUSED
    files = {
        "module_0003.jit_g.before_optimizations.txt": unfused,
        "module_0003.jit_g.0000.simplification.after_pipeline-start.before_algsimp.txt": unfused,
        "module_0003.jit_g.0001.fusion.after_fusion.before_pipeline-end.txt": fused,
        "module_0003.jit_g.0002.copy-insertion.after_adding_copies.txt": fused,
        "module_0003.jit_g.cpu_after_optimizations.txt": fused,
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    log = read_pass_log(tmp_path)
    assert log.module == "jit_g"
    assert [(s.pipeline, s.name, s.changed) for s in log.steps] == [
        ("simplification", "pipeline-start", False),
        ("fusion", "fusion", True),
        ("copy-insertion", "adding_copies", False),
    ]
    fusion = log.steps[1]
    assert (fusion.instructions, fusion.fusions) == (5, 1)
    assert fusion.added == {"fusion": 1, "parameter": 1}
    assert log.steps[0].instructions == 3 and not log.steps[0].added
    assert "+  ROOT %fusion" in log.diff(1)
    assert (
        read_pass_log(tmp_path / "missing") is None
        if (tmp_path / "missing").mkdir() is None
        else False
    )


# Lines the fast opcode count must not miscount: a tuple shape, a nested tuple, a TPU tiled
# layout with a memory space, a constant literal with braces, a dynamic dimension, a token.
TRICKY = (
    HEAD
    + """ENTRY %main.9 (x.1: f32[8,128]) -> (f32[8,128], (s32[], f32[2])) {
  %x.1 = f32[8,128]{1,0:T(8,128)S(1)} parameter(0)
  %c = f32[2,2]{1,0} constant({ { 1, 2 }, { 3, 4 } })
  %t = (f32[8,128]{1,0:T(8,128)}, s32[]) tuple(%x.1, %i)
  %g = f32[8,128]{1,0} get-tuple-element((f32[8,128]{1,0}, s32[]) %t), index=0
  %d = f32[<=8,128]{1,0} set-dimension-size(%g, %i), dimensions={0}
  %tok = token[] after-all()
  %i = s32[] constant(3)
  ROOT %r = (f32[8,128]{1,0}, (s32[], f32[2]{0})) tuple(%g, %nested)
}
"""
)


def _opcodes(text):
    module = parse_hlo(text)
    return Counter(i.opcode for c in module.computations.values() for i in c.instructions)


def test_the_fast_opcode_count_is_the_parsers(comp):
    for text in (UNFUSED, FUSED, TRICKY):
        assert count_opcodes(text) == _opcodes(text)
    assert count_opcodes(TRICKY)["tuple"] == 2
    for k in range(len(comp.passes)):  # every module XLA dumped for a real program
        text = comp.passes.hlo(k)
        assert count_opcodes(text) == _opcodes(text), comp.passes.steps[k]


def _entry(text):
    entry = parse_hlo(text).entry_computation
    if entry is None or not entry.is_entry:
        return []
    return [(i.name, i.opcode) for i in entry.instructions]


def test_the_entry_scan_is_the_parsers(comp):
    """What a profile reads of the optimised module (the ENTRY computation's names and
    opcodes, scanned from the text) is what the parser builds, line for line."""
    for text in (UNFUSED, FUSED, TRICKY):
        assert entry_instructions(text) == _entry(text) != []
    assert ("t", "tuple") in entry_instructions(TRICKY)  # a tuple shape: the full rule
    no_entry = TRICKY.replace("ENTRY %main.9", "%main.9")
    assert entry_instructions(no_entry) == _entry(no_entry) == []
    for k in range(len(comp.passes)):  # every module XLA dumped for a real program
        text = comp.passes.hlo(k)
        assert entry_instructions(text) == _entry(text), comp.passes.steps[k]
    assert entry_instructions(comp.hlo) == _entry(comp.hlo) != []


_HUNK_HEAD = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _patch(a, diff):
    """Apply a unified diff to ``a`` (lists of lines), checking every context and removed line
    against ``a`` at the hunk's line numbers."""
    lines = diff.splitlines(keepends=True)
    out, pos, i = [], 0, 2
    while i < len(lines):
        m = _HUNK_HEAD.match(lines[i])
        assert m, lines[i]
        length = int(m[2]) if m[2] is not None else 1
        start = int(m[1]) - 1 if length else int(m[1])
        assert start >= pos
        out += a[pos:start]
        pos, i, seen = start, i + 1, 0
        while i < len(lines) and not lines[i].startswith("@@"):
            kind, body = lines[i][0], lines[i][1:]
            if kind in " -":
                assert a[pos] == body
                pos, seen = pos + 1, seen + 1
            if kind in " +":
                out.append(body)
            i += 1
        assert seen == length
    return out + a[pos:]


def test_the_trimmed_diff_is_a_valid_diff_with_the_whole_files_line_numbers(comp):
    rng = random.Random(0)
    for _ in range(2000):
        a = [f"l{rng.randint(0, 5)}\n" for _ in range(rng.randint(0, 40))]
        b = list(a)
        for _ in range(rng.randint(0, 5)):
            k = rng.randint(0, len(b))
            op = rng.choice("idr")
            if op == "i":
                b.insert(k, f"n{rng.randint(0, 5)}\n")
            elif b:
                k = min(k, len(b) - 1)
                if op == "d":
                    b.pop(k)
                else:
                    b[k] = f"r{rng.randint(0, 5)}\n"
        diff = unified_diff(a, b, "a", "b")
        assert (diff == "") == (a == b)
        assert _patch(a, diff) == b
    log = comp.passes
    for step in log.changed():  # a real program's steps: each diff turns one module into the next
        if step.index:
            before = log.hlo(step.index - 1).splitlines(keepends=True)
            assert _patch(before, log.diff(step.index)) == log.hlo(step.index).splitlines(True)
