"""The shortcuts that keep analysis cheap give the same answers as the long way.

* the parser's one-regex path for common instruction lines == the general path;
* XLA's cost model run once per distinct kernel (structural key) == run on every kernel;
* the StableHLO op count (walked, not printed) == a count of the generic printout;
* ``compiled.as_text()`` is printed once per executable; the cyclic GC is restored after analysis.
"""

from __future__ import annotations

import gc
import re

import jax
import jax.numpy as jnp
import pytest

from benchmarks.models import transformer_train_step
from nbcompile._compat import stablehlo_ops
from nbcompile.analysis import analyse, core
from nbcompile.analysis import compiled as compiled_mod
from nbcompile.analysis.hlo import _META_ITEM, _METADATA, _parse_instruction, _parse_slow, parse_hlo
from nbcompile.analysis.lines import Locator as LineMap
from nbcompile.capture.source import SourceInfo
from nbcompile.stages import Stages

from .helpers import make_artifacts


@pytest.fixture(scope="module")
def train2():
    fn, args = transformer_train_step(n_layers=2, d=64, seq=8, heads=2)
    return make_artifacts(fn, *args)


def _reference(line: str) -> dict:
    """The general rule for every field, without the fast paths."""
    root, name, shape, opcode, inner, tail = _parse_slow(line, 1)
    tail = tail.strip()
    meta = _METADATA.search(tail)
    items = dict(_META_ITEM.findall(meta.group(1))) if meta else {}
    if meta:
        before = tail[: meta.start()].rstrip()
        bare = (before[:-1] if before.endswith(",") else before) + tail[meta.end() :]
    else:
        bare = tail
    op_name = items.get("op_name")
    if op_name is not None:
        op_name = re.sub(r"\\(.)", r"\1", op_name[1:-1])
    frame = items.get("stack_frame_id")
    plain = opcode in ("constant", "parameter")
    operands = [] if plain else re.findall(r"%([^\s,(){}]+)", inner)
    return {
        "root": root is not None,
        "name": name,
        "shape": shape,
        "opcode": opcode,
        "operands": operands,
        "literal": inner if plain else None,
        "tail": tail,
        "bare_tail": bare,
        "op_name": op_name,
        "stack_frame_id": int(frame) if frame else None,
    }


def _fields(line: str) -> dict:
    i = _parse_instruction(line, "c", 1)
    return {
        "root": i.is_root,
        "name": i.name,
        "shape": i.shape,
        "opcode": i.opcode,
        "operands": i.operands,
        "literal": i.literal,
        "tail": i.tail,
        "bare_tail": i.bare_tail,
        "op_name": i.op_name,
        "stack_frame_id": i.stack_frame_id,
    }


HAND_WRITTEN = [
    '%a = f32[4]{0} add(%x, %y), metadata={op_name="jit(f)/add" stack_frame_id=3}',
    '%a = f32[4]{0} add(%x, %y), metadata={op_name="jit(f)/a}b" stack_frame_id=3}, x=1',
    '%a = f32[4]{0} add(%x, %y), metadata={op_name="say \\"hi\\"" source_file="/c.py" '
    "source_line=7}",
    '%a = f32[4]{0} add(%x, %y), kind=kLoop, metadata={op_name="n"}, calls=%fc',
    '%a = f32[4]{0} add(%x, %y), metadata={op_type="t" op_name="n" stack_frame_id=1}',
    'ROOT %t = (f32[4]{0}, s32[]) tuple(%a, %b), metadata={op_name="tup"}',
    '%p = f32[8,128]{1,0:T(8,128)} parameter(0), metadata={op_name="x" stack_frame_id=2}',
    "%c = f32[2]{0} constant({1, 2})",
    '%d = f32[4]{0} add(%x, %y), xmetadata={op_name="no"}',
]


@pytest.mark.parametrize("line", HAND_WRITTEN)
def test_fast_path_equals_general_rule_on_hand_written_lines(line):
    assert _fields(line) == _reference(line)


def test_fast_path_equals_general_rule_on_real_modules(train2):
    lines = [raw.strip() for raw in train2.hlo_text.splitlines()]
    lines = [ln for ln in lines if " = " in ln and not ln.endswith("{") and "=" in ln.split()[1]]
    assert len(lines) > 500
    for line in lines:
        assert _fields(line) == _reference(line), line


def test_attributes_read_without_splitting_equal_the_split(train2):
    """``kind`` / ``called`` match ``key=value`` on simple tails instead of splitting them."""
    from nbcompile.analysis.hlo import _CALL_KEYS, _NAME_REF

    module = parse_hlo(train2.hlo_text)
    fast_paths = 0
    for comp in module.computations.values():
        for instr in comp.instructions:
            fast_paths += instr._plain() is not None and "=" in instr.bare_tail
            kind, called = instr.kind, list(instr.called)
            attrs = instr.attrs  # the long way: the whole tail split at top-level commas
            raw = attrs.get("kind")
            assert kind == (None if raw is None else raw[1:].lower()), instr.text
            long_way = [
                n
                for key in _CALL_KEYS
                if key in attrs
                for n in _NAME_REF.findall(attrs[key]) or [attrs[key].strip("{} ")]
            ]
            assert called == long_way, instr.text
    assert fast_paths > 100


HEAD_TAILS = [
    # (tail, kind, called): a fusion's attributes read before its first string or bracket
    (', kind=kLoop, calls=%fused.1, backend_config={"a":1}', "loop", ["fused.1"]),
    (
        ', kind=kCustom, calls=%f, backend_config={"fusion_config":{"kind":"__ynn"}}',
        "custom",
        ["f"],
    ),
    # the attribute the cut runs into is not read from the head
    (', kind=kLoop, calls=%f{x}, metadata={op_name="n"}', "loop", None),
    # named after a string or a bracket: read the long way
    (', backend_config="calls=%decoy", kind=kInput, calls=%real', "input", ["real"]),
    (", replica_groups=[2,2]<=[4], kind=kOutput, calls=%g", "output", ["g"]),
    (', frontend_attributes={calls="%decoy"}, calls=%h', None, ["h"]),
    (", calls=%k", None, ["k"]),
]


@pytest.mark.parametrize(("tail", "kind", "called"), HEAD_TAILS)
def test_a_fusions_head_attributes_equal_the_split(tail, kind, called):
    """``kind`` and a fusion's ``called`` read before the tail's first string or bracket
    (``Instruction._head``) give what splitting the whole tail gives."""
    from nbcompile.analysis.hlo import _CALL_KEYS, _NAME_REF

    line = f"%fusion = f32[4]{{0}} fusion(%x){tail}"
    fast, slow = _parse_instruction(line, "c", 1), _parse_instruction(line, "c", 1)
    got = (fast.kind, list(fast.called))
    attrs = slow.attrs
    raw = attrs.get("kind")
    long_way = [
        n
        for key in _CALL_KEYS
        if key in attrs
        for n in _NAME_REF.findall(attrs[key]) or [attrs[key].strip("{} ")]
    ]
    assert got == (None if raw is None else raw[1:].lower(), long_way)
    assert got[0] == kind
    if called is not None:
        assert got[1] == called


def test_ops_that_never_call_are_not_looked_at_and_others_are():
    """``called`` skips the tails of opcodes that cannot call a computation; any other
    opcode (``reduce``, ``sort``, ``custom-call``, one XLA adds later) is looked at."""
    add = _parse_instruction("%a = f32[4]{0} add(%x, %y), to_apply=%decoy", "c", 1)
    assert add.called == []  # an add has no computation to call, whatever its tail says
    for opcode in ("reduce", "sort", "custom-call", "some-new-op"):
        instr = _parse_instruction(f"%r = f32[] {opcode}(%x, %z), to_apply=%sum", "c", 1)
        assert instr.called == ["sum"], opcode


def test_cost_once_per_distinct_kernel_equals_cost_of_every_kernel(train2, monkeypatch):
    """Two layers repeat their kernels: the memo must cut XLA calls and change no figure."""
    module = parse_hlo(train2.hlo_text)
    source = LineMap(train2.source)
    calls = []
    real = compiled_mod._jax.xla_cost
    monkeypatch.setattr(compiled_mod._jax, "xla_cost", lambda t: calls.append(t) or real(t))
    info = compiled_mod.analyse_compiled(module, source, grad=False)
    assert info.unit_costs and all(c["source"] == "xla" for c in info.unit_costs.values())
    assert len(calls) < len(info.unit_costs)
    entry = module.entry_computation
    shapes = {i.name: i.shape for i in entry.instructions}
    for instr in entry.instructions:
        if instr.name in info.unit_costs:
            alone = compiled_mod._cost(module, instr, shapes, use_xla=True)
            assert alone == info.unit_costs[instr.name], instr.name


def test_structural_key_tells_different_kernels_apart():
    text = """HloModule m

%f1 (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %e = f32[4]{0} exponential(%p), metadata={op_name="a"}
}

%f2 (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %e = f32[4]{0} exponential(%p), metadata={op_name="b"}
}

%f3 (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %e = f32[4]{0} negate(%p)
}

ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %a = f32[4]{0} fusion(%x), kind=kLoop, calls=%f1
  %b = f32[4]{0} fusion(%a), kind=kLoop, calls=%f2
  ROOT %c = f32[4]{0} fusion(%b), kind=kLoop, calls=%f3
}
"""
    module = parse_hlo(text)
    structure = compiled_mod._Structure(module)
    assert structure.computation("f1") == structure.computation("f2")  # metadata differs only
    assert structure.computation("f1") != structure.computation("f3")
    entry = module.entry_computation
    shapes = {i.name: i.shape for i in entry.instructions}
    a, b, c = entry.instructions[1:]
    assert structure.kernel(a, shapes) == structure.kernel(b, shapes)
    assert structure.kernel(a, shapes) != structure.kernel(c, shapes)
    info = compiled_mod.analyse_compiled(module, LineMap(SourceInfo()), grad=False)
    trans = [info.unit_costs[n]["transcendentals"] for n in ("a", "b", "c")]
    assert trans == [4.0, 4.0, 0.0]


def test_stablehlo_count_matches_the_generic_printout():
    def f(x):
        return jnp.sum(jnp.sin(x) * 2.0) + jnp.max(x)

    module = jax.jit(f).lower(jnp.ones((4, 3))).compiler_ir("stablehlo")
    generic = module.operation.get_asm(print_generic_op_form=True)
    names = re.findall(r'"((?:stablehlo|chlo)\.[\w.]+)"\(', generic)
    expected = sum(1 for n in names if n != "stablehlo.return")
    count, targets = stablehlo_ops(module)
    assert count == expected and count > 6 and targets == []
    assert "stablehlo.return" in names  # reduce bodies were walked, and their returns left out


def test_optimised_text_printed_once_per_executable():
    class FakeCompiled:
        printed = 0

        def as_text(self):
            FakeCompiled.printed += 1
            return "HloModule m"

    stages = Stages(
        jitted=None, traced=None, lowered=None, compiled=FakeCompiled(), target=None, placement=None
    )
    assert stages.hlo_text == stages.hlo_text == "HloModule m"
    assert FakeCompiled.printed == 1
    stages.compiled = FakeCompiled()  # a recompile prints the new executable
    assert stages.hlo_text == "HloModule m" and FakeCompiled.printed == 2


def test_pauses_in_two_threads_end_with_the_last_one():
    """The analysis beside XLA's compile pauses the collector in its thread while the
    compiling thread may pause it too: the first pause in records the switch, the last one
    out restores it, in either order."""
    import threading

    from nbcompile import _gc

    assert gc.isenabled()
    for first_out in ("main", "thread"):
        entered, leave = threading.Event(), threading.Event()

        def beside(entered=entered, leave=leave):
            with _gc.paused():
                entered.set()
                leave.wait(10)

        thread = threading.Thread(target=beside)
        with _gc.paused():
            thread.start()
            entered.wait(10)
            assert not gc.isenabled()
            if first_out == "thread":
                leave.set()
                thread.join(10)
                assert not gc.isenabled()  # this thread's pause is still under way
        if first_out == "main":
            assert not gc.isenabled()  # the other thread's pause is still under way
            leave.set()
            thread.join(10)
        assert gc.isenabled(), first_out
    gc.disable()
    try:
        with _gc.paused():
            pass
        assert not gc.isenabled()  # a caller's choice is kept
    finally:
        gc.enable()


def test_analysis_restores_the_cyclic_gc(train2, monkeypatch):
    assert gc.isenabled()
    analyse(train2)
    assert gc.isenabled()

    def boom(*a, **k):
        assert not gc.isenabled()
        raise RuntimeError("boom")

    monkeypatch.setattr(core, "trace_graph", boom)
    with pytest.raises(RuntimeError):
        analyse(train2)
    assert gc.isenabled()
    gc.disable()
    try:
        monkeypatch.undo()
        analyse(train2)
        assert not gc.isenabled()  # a caller's choice is kept
    finally:
        gc.enable()
