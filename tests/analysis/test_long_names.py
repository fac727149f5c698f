"""A scope name of any length costs the analysis time linear in it (issue 41, item 1).

A 100 KB ``jax.named_scope`` name stalled the analysis for minutes: ``re.findall(r"(\\w+)\\(",
name_stack)`` restarts at every position of a long word run, ``\\)+$`` at every ``)`` of a long
run of them. Every name-stack and ``op_name`` parse now runs in linear time
(``analysis/namestack.py``), keeps what the old rules gave (property test), and caps what is
kept of an absurd name.

Linearity without absolute timing: every parse is timed on the same number of characters in
all, as many short names or a few long ones (CPU time of this thread, best of three). Linear,
the time is the same at every name length; quadratic, it grows with the length (x4 per x4) --
the smaller step is checked first so a quadratic parse fails within about a minute, not hours.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbcompile.analysis import calls, compiled, hlo, namestack, traced

TOTAL = 1 << 18  # characters parsed per measurement, whatever the name length
SIZES = (1 << 10, 1 << 12, 1 << 14)
STEP_LIMIT = 2.5  # time(4n) / time(n) at the same characters in all: linear ~1, quadratic ~4
SPAN_LIMIT = 4.0  # time(16n) / time(n): linear ~1, quadratic ~16
FLOOR = 0.002  # seconds: below this, timer noise dominates


def _shapes(n: int) -> dict[str, str]:
    """Names that made a regex restart at every position, as name stacks."""
    return {
        "word run": "a" * n,
        "closing run": ")" * n + "b",
        "opening pairs": "a(" * (n // 2),
        "jit pairs": "jit(" * (n // 4),
        "dotted run": "a.b-" * (n // 4),
        "under transforms": "transpose(jvp(" + "c" * n + "))",
        "deep": "/".join(["s" * 63] * (n // 64)),
    }


def _best(fn: Callable[[str], object], names: list[str]) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.thread_time()
        for name in names:
            fn(name)
        best = min(best, time.thread_time() - start)
    return best


_KINDS = calls.CallKinds({"loss#1": "call"})
_PARSES: dict[str, Callable[[str], object]] = {
    # the undecorated functions: each call parses (the caches would answer repeats)
    "traced scopes": traced._path_of.__wrapped__,
    "traced backward flags": traced._transposed.__wrapped__,
    "compiled module path": lambda s: compiled._module_path.__wrapped__(f"jit(f)/{s}/sin"),
    "call path": lambda s: calls._op_name_parts.__wrapped__(f"jit(f)/loss#1/{s}/sin", _KINDS),
    "op phase": lambda s: compiled.op_name_phase(f"jit(f)/{s}/sin;jvp(f)/{s}/cos"),
}


@pytest.mark.parametrize("parse", sorted(_PARSES))
@pytest.mark.parametrize("shape", sorted(_shapes(8)))
def test_parsing_a_name_is_linear_in_its_length(parse: str, shape: str) -> None:
    fn = _PARSES[parse]
    times = []
    for size in SIZES:
        name = _shapes(size)[shape]
        # distinct names (a digit in front) so that no cache answers; TOTAL characters in all
        names = [f"{k}{name}" for k in range(max(1, TOTAL // len(name)))]
        times.append(_best(fn, names))
        if len(times) == 2 and times[1] > FLOOR:
            assert times[1] / max(times[0], FLOOR / 4) < STEP_LIMIT, (shape, parse, times)
    if times[-1] > FLOOR:
        assert times[-1] / max(times[0], FLOOR / 4) < SPAN_LIMIT, (shape, parse, times)


def _hlo_with(op_name: str) -> str:
    quoted = op_name.replace("\\", "\\\\").replace('"', '\\"')
    return (
        "HloModule m\n\nENTRY %main (x: f32[4]) -> f32[4] {\n"
        "  %x = f32[4]{0} parameter(0)\n"
        f'  ROOT %s = f32[4]{{0}} sine(%x), metadata={{op_name="{quoted}" source_line=3}}\n'
        "}\n"
    )


@pytest.mark.parametrize("shape", ["word run", "closing run", "under transforms"])
@pytest.mark.parametrize("extra", ["", '\\"{}'])  # escapes and braces: the full metadata rule
def test_hlo_metadata_with_a_long_op_name_parses_in_linear_time(shape: str, extra: str) -> None:
    times = []
    for size in SIZES:
        name = _shapes(size)[shape] + extra
        texts = [_hlo_with(f"jit(f)/{k}{name}/sin") for k in range(max(1, TOTAL // len(name)))]
        times.append(_best(hlo.parse_hlo, texts))
    if times[-1] > FLOOR:
        assert times[-1] / max(times[0], FLOOR / 4) < SPAN_LIMIT, (shape, times)
    module = hlo.parse_hlo(texts[0])
    (instr,) = [i for i in module.entry_computation.instructions if i.opcode == "sine"]
    assert instr.op_name == f"jit(f)/0{name}/sin"


# -- the linear parses give what the regexes gave -------------------------------------------

_OLD_LEAD = re.compile(r"^(?:\w+\()*")
_OLD_LEAD_DOTTED = re.compile(r"^(?:[\w.\-]+\()*")
_NAME_CHARS = st.text(alphabet='ab_.-()/;é 1\\"', max_size=40)


def _old_rule(text: str, lead: re.Pattern[str]) -> str:
    """The regexes' rule (``^(?:\\w+\\()+|\\)+$`` removed), except that a name's own closing
    ``)`` beyond those its transforms opened stays (``layers_2 (relu)``)."""
    m = lead.match(text)
    opened, body = m.group().count("("), text[m.end() :]
    closing = len(re.search(r"\)*$", body).group())
    return body[: len(body) - opened] if closing > opened else body[: len(body) - closing]


@settings(max_examples=2000, deadline=None)
@given(_NAME_CHARS)
def test_linear_parses_match_the_old_rules(text: str) -> None:
    assert namestack.transform_names(text) == frozenset(re.findall(r"(\w+)\(", text))
    assert namestack.strip_transforms(text) == _old_rule(text, _OLD_LEAD)
    assert namestack.strip_transforms(text, dotted=True) == _old_rule(text, _OLD_LEAD_DOTTED)


def test_a_name_ending_in_a_parenthesis_keeps_it() -> None:
    assert namestack.strip_transforms("transpose(jvp(MLP))") == "MLP"
    assert namestack.strip_transforms("jvp()") == ""
    assert namestack.strip_transforms("layers_2 (relu)") == "layers_2 (relu)"
    assert namestack.strip_transforms("jvp(layers_2 (relu))") == "layers_2 (relu)"
    assert namestack.strip_transforms("transpose(jvp(layers_2 (relu)))", dotted=True) == (
        "layers_2 (relu)"
    )


def test_short_names_are_kept_and_long_ones_cut_apart() -> None:
    assert namestack.shown("Dense_0") == "Dense_0"
    one, other = "a" * 100_000, "a" * 99_999 + "b"
    assert len(namestack.shown(one)) <= namestack.LIMIT
    assert "100,000 chars" in namestack.shown(one)
    assert namestack.shown(one) != namestack.shown(other)  # they differ past the cut
    assert namestack.shown(one).startswith("a" * 100)


def test_a_cell_with_a_100kb_scope_name_analyses_and_shows_it_cut() -> None:
    """End to end: two 100 KB scope names (a word run, a run of ``)``), compiled and analysed;
    the analysis' own work on them is linear (above), so it takes about what plain ``jax.jit``
    takes (generous bound: the quadratic parse took minutes here); nothing keeps or shows more
    than ``namestack.LIMIT`` characters of either name, and the traced and compiled sides name
    the scope the same."""
    import jax
    import jax.numpy as jnp

    import nbcompile

    n = 100_000

    def f(x):
        with jax.named_scope("a" * n):
            y = jnp.sin(x) * 2.0
        with jax.named_scope(")" * n + "b"):
            y = jnp.cos(y) @ y.T
        return y.sum()

    x = jnp.ones((8, 8))
    start = time.monotonic()
    plain_text = jax.jit(f).lower(x).compile().as_text()
    plain = time.monotonic() - start
    start = time.monotonic()
    c = nbcompile.compile(f, x)
    took = time.monotonic() - start
    assert took < 20 * plain + 60, (took, plain)
    shown = namestack.shown("a" * n)
    traced_paths = {node.path for node in c.analysis.traced_graph.nodes}
    assert any(shown in p.split("/") for p in traced_paths), traced_paths
    # XLA names the compiled ops by the scope only where it keeps the op name: jaxlib 0.12.0.1
    # keeps 100 KB names; 0.12.1 drops an op name longer than 4,096 characters, and then no
    # kernel is named after the scope (none after a wrong one either)
    kept = "a" * n in plain_text
    modules = {m for fusion in c.analysis.fusions for m in fusion.modules}
    assert (shown in modules) == kept, (kept, modules)
    if not kept:
        assert modules <= {""}, modules
    everything = json.dumps(c.analysis.to_json()) + repr(c)
    assert not re.search(r"a{500}|\){500}", everything)


def test_a_path_jax_writes_twice_in_a_transposed_custom_jvp_is_read_once() -> None:
    """JAX 0.12.1 names the transposed body of a ``custom_jvp`` rule (``jax.nn.softmax``'s)
    with the enclosing path again (``transpose(jvp(Outer))/attn/jvp(Outer)/attn/mul``): read
    as written, those kernels sat in ``Outer/attn/Outer/attn`` of the forward. Read once, they
    sit in ``Outer/attn``, backward, on every JAX."""
    import jax
    import jax.numpy as jnp

    import nbcompile

    written = "jit(f)/transpose(jvp(Outer))/attn/jvp(Outer)/attn/mul"
    assert namestack.unrepeated(written) == "jit(f)/transpose(jvp(Outer))/attn/mul"
    for kept in (
        "jit(f)/transpose(jvp(Outer))/attn/mul",
        "jit(f)/jvp(Outer)/attn/jvp(Outer)/attn/mul",  # no transpose: not this quirk
        "transpose(jvp(A))/b/jvp(C)/b/x",  # another scope: not a repeat
        "jit(g)/jit(g)/add",
    ):
        assert namestack.unrepeated(kept) == kept

    def f(x):
        with jax.named_scope("Outer"), jax.named_scope("attn"):
            return (jax.nn.softmax(x * 2.0, axis=-1) ** 2).sum()

    c = nbcompile.compile(f, jnp.ones((4, 8)), grad=0)
    paths = {m for fusion in c.grad.analysis.fusions for m in fusion.modules}
    assert paths and all(p.split("/")[:2] == ["Outer", "attn"] for p in paths), paths
    assert not any("Outer/attn/Outer" in p for p in paths), paths
