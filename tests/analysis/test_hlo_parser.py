"""The HLO text parser: real modules, both location syntaxes, collectives, and a fuzz run.

Fuzz: 1,000 hypothesis examples x 12 texts each (mutations of real and hand-written modules,
plus generated instruction soup) = 12,000 texts; the only exception allowed is HloParseError.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbcompile.analysis import HloParseError, parse_hlo
from nbcompile.analysis.hlo import parse_replica_groups, shape_bytes


def loop_model(x):
    def body(state):
        i, v = state
        v = jax.lax.cond(jnp.sum(v) > 0, lambda u: u * 0.5, lambda u: jnp.cos(u), v)
        return i + 1, v

    return jax.lax.while_loop(lambda s: s[0] < 3, body, (0, x))[1]


@pytest.fixture(scope="module")
def loop_hlo():
    return jax.jit(loop_model).lower(jnp.ones((4,))).compile().as_text()


COLLECTIVES = """HloModule sharded, entry_computation_layout={(f32[8]{0})->f32[8]{0}}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0), metadata={op_name="x" source_file="/cell.py" source_line=3}
  %ar = f32[8]{0} all-reduce(%p), replica_groups={{0,1},{2,3}}, to_apply=%add, metadata={op_name="jit(f)/psum" source_file="/cell.py" source_line=4}
  %ag = f32[16]{0} all-gather(%ar), replica_groups=[2,2]<=[4], dimensions={0}
  %rs = f32[8]{0} reduce-scatter(%ag), replica_groups=[2,2]<=[2,2]T(1,0), dimensions={0}, to_apply=%add
  %a2a = f32[8]{0} all-to-all(%rs), replica_groups={{0,1,2,3}}, dimensions={0}
  ROOT %cp = f32[8]{0} collective-permute(%a2a), source_target_pairs={{0,1},{1,0}}
}
"""


def test_real_module_structure(loop_hlo):
    m = parse_hlo(loop_hlo)
    entry = m.entry_computation
    assert entry is not None and entry.root is not None
    ops = {i.opcode for c in m.computations.values() for i in c.instructions}
    assert {"while", "parameter"} <= ops
    everything = [i for c in m.computations.values() for i in c.instructions]
    whiles = [i for i in everything if i.opcode == "while"]
    assert whiles and all(len(w.called) == 2 for w in whiles)
    assert all(name in m.computations for w in whiles for name in w.called)
    assert m.instruction_count() == loop_hlo.count(" = ")
    conds = [i for i in everything if i.opcode == "conditional"]
    assert conds and all(len(c.called) == 2 for c in conds)
    assert all(name in m.computations for c in conds for name in c.called)


def test_stack_frames_resolve_to_this_file(loop_hlo):
    m = parse_hlo(loop_hlo)
    assert m.files and m.frames and m.locations
    lines = {
        next((line for file, line in m.stack(i) if file == __file__), None)
        for c in m.computations.values()
        for i in c.instructions
    } - {None}
    first = loop_model.__code__.co_firstlineno
    assert lines and all(first <= line <= first + 6 for line in lines)


def test_printed_parent_frame_is_one_more_than_real():
    text = """HloModule m

FileNames
1 "/cell.py"

FunctionNames
1 "f"

FileLocations
1 {file_name_id=1 function_name_id=1 line=9 end_line=9 column=1 end_column=2}
2 {file_name_id=1 function_name_id=1 line=4 end_line=4 column=1 end_column=2}

StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=2 parent_frame_id=2}

ENTRY %main () -> f32[] {
  ROOT %c = f32[] constant(1), metadata={op_name="jit(f)/c" stack_frame_id=2}
}
"""
    m = parse_hlo(text)
    assert m.stack(m.entry_computation.root) == (("/cell.py", 4), ("/cell.py", 9))


def test_inline_source_locations_and_collectives():
    m = parse_hlo(COLLECTIVES)
    by = {i.name: i for i in m.entry_computation.instructions}
    assert m.stack(by["ar"]) == (("/cell.py", 4),)
    assert by["ar"].op_name == "jit(f)/psum" and by["ar"].called == ["add"]
    assert parse_replica_groups(by["ar"].attrs["replica_groups"]) == [[0, 1], [2, 3]]
    assert parse_replica_groups(by["ag"].attrs["replica_groups"]) == [[0, 1], [2, 3]]
    assert parse_replica_groups(by["rs"].attrs["replica_groups"]) == [[0, 2], [1, 3]]
    assert parse_replica_groups(by["a2a"].attrs["replica_groups"]) == [[0, 1, 2, 3]]
    assert by["cp"].is_root and by["cp"].opcode == "collective-permute"


def test_shape_bytes():
    assert shape_bytes("f32[4,8]{1,0}") == 128
    assert shape_bytes("(f32[], bf16[2,3]{1,0:T(8,128)}, pred[3])") == 4 + 12 + 3
    assert shape_bytes("token[]") == 0


@pytest.mark.parametrize(
    "text",
    [
        "ENTRY %m () -> f32[] {\n  ROOT %x = f32[] add(\n}\n",
        "ENTRY %m () -> f32[] {\n  %x = f32[]\n}\n",
        "ENTRY %m () -> f32[] {\n  ROOT %c = f32[] constant(1)\n",
        "garbage line\n",
    ],
)
def test_malformed_text_raises_parse_error(text):
    with pytest.raises(HloParseError):
        parse_hlo(text)


def _exercise(text: str) -> None:
    try:
        m = parse_hlo(text)
    except HloParseError:
        return
    for comp in m.computations.values():
        comp.root  # noqa: B018
        for i in comp.instructions:
            m.stack(i)
            i.called, i.kind, i.bytes  # noqa: B018
            parse_replica_groups(i.attrs.get("replica_groups"))


_ALPHABET = [
    *'(){}[]",=%:;<>/\\ \n\t',
    "ROOT ",
    "ENTRY ",
    "fusion(",
    "kind=kLoop",
    "calls=",
    "metadata={",
    "stack_frame_id=",
    "parameter(0)",
    "f32[4]",
    "StackFrames\n",
    "FileNames\n",
    "replica_groups=[2,2]<=[4]",
    "T(1,0)",
    "}\n",
    "\n%c = f32[] constant(1)",
]


@st.composite
def _mutated(draw, seeds):
    text = draw(st.sampled_from(seeds))
    for _ in range(draw(st.integers(1, 4))):
        if not text:
            break
        i = draw(st.integers(0, len(text) - 1))
        j = min(len(text), i + draw(st.integers(0, 40)))
        action = draw(st.sampled_from(["delete", "insert", "replace", "duplicate", "truncate"]))
        junk = "".join(draw(st.lists(st.sampled_from(_ALPHABET), max_size=6)))
        if action == "delete":
            text = text[:i] + text[j:]
        elif action == "insert":
            text = text[:i] + junk + text[i:]
        elif action == "replace":
            text = text[:i] + junk + text[j:]
        elif action == "duplicate":
            text = text[:j] + text[i:j] + text[j:]
        else:
            text = text[:i]
    return text


def test_fuzz_parser_only_raises_parse_error(loop_hlo):
    mlp = jax.jit(lambda w, x: jnp.tanh(x @ w).sum()).lower(jnp.ones((4, 4)), jnp.ones((2, 4)))
    seeds = [
        loop_hlo,
        COLLECTIVES,
        mlp.compile().as_text(),
        mlp.compiler_ir("hlo").as_hlo_module().to_string(),
    ]
    # Small seeds keep each example fast: cut the big modules into computation-sized pieces.
    pieces = [p for s in seeds for p in s.split("\n\n") if p.strip()]
    seeds = seeds + pieces
    count = 0

    @settings(
        max_examples=1000,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(_mutated(seeds), min_size=11, max_size=11), st.text(max_size=200))
    def run(texts, soup):
        nonlocal count
        for text in [*texts, soup]:
            _exercise(text)
            count += 1

    run()
    assert count >= 10_000


def test_instruction_count_without_parsing_matches_the_parser():
    from nbcompile.analysis.hlo import count_instructions

    def f(x):
        return jax.lax.fori_loop(0, 3, lambda i, v: jnp.tanh(v) @ v, x).sum()

    lowered = jax.jit(f).lower(jnp.ones((8, 8)))
    for text in (
        lowered.compiler_ir("hlo").as_hlo_module().to_string(),
        lowered.compile().as_text(),
    ):
        assert count_instructions(text) == parse_hlo(text).instruction_count() > 5
