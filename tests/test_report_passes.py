"""The Passes tab's data (``extras["passes"]``, nbcompile/report/metal.py) and its static picture
(nbcompile/report/passesfig.py): the report of a ``--passes`` compilation carries XLA's steps
that changed the program and the code of its costliest kernels with their lines; a compilation
without the dump carries neither; the static fallback holds the pass table, the chart and the
code of the five costliest kernels."""

from __future__ import annotations

import base64
import re
from html import escape, unescape
from types import SimpleNamespace

import jax.numpy as jnp
import pytest

import nbcompile
from nbcompile.analysis import unlabelled
from nbcompile.report.fallback import fallback_html
from nbcompile.report.html import pack_report, unpack_report
from nbcompile.report.metal import DIFF_CHARS, MAX_KERNELS, metal_json, passes_json

from .measure._metal_cell import LOOP_LINE, compiled, tanh_kernel


@pytest.fixture
def comp(shell):
    return compiled(shell)


def test_the_report_of_a_passes_compile_has_the_steps_that_changed_the_program(comp):
    report = comp.report()
    p = report["extras"]["passes"]
    log = comp.passes
    assert p["total_steps"] == len(log.steps) and p["module"] == log.module
    shipped = [s["index"] for s in p["steps"]]
    assert shipped == [0] + [s.index for s in log.steps if s.changed and s.index]
    for step in p["steps"]:
        truth = log.steps[step["index"]]
        assert (step["instructions"], step["fusions"]) == (truth.instructions, truth.fusions)
        assert (step["added"], step["removed"]) == (truth.added, truth.removed)
        full = re.sub(r",? metadata=\{[^{}]*\}", "", log.diff(step["index"]))
        assert "metadata={" not in step["diff"]  # left out: the view shows what changed
        assert full.startswith(step["diff"]) and len(step["diff"]) <= DIFF_CHARS
        assert step["diff_chars"] == (len(full) if len(full) > DIFF_CHARS else None)
    # the fusion pass formed the loop's kernel, which is a kernel of the final program
    tanh = tanh_kernel(comp)
    formed = [s for s in p["steps"] if tanh in s["kernels"]]
    assert formed and formed[0]["name"] == "fusion" and "fusion" in formed[0]["added"]
    assert p["from"] == "XLA" and "dump" in p["source"]
    assert unlabelled(report) == []
    assert unpack_report(pack_report(report))["extras"]["passes"] == p  # survives the wire


def test_the_report_carries_each_kernels_code_with_its_source_lines(comp):
    report = comp.report()
    codes = {k["name"]: k for k in report["extras"]["passes"]["kernel_code"]}
    tanh = tanh_kernel(comp)
    k = codes[tanh]
    truth = comp.kernel_code(tanh)
    assert k["asm"] == truth.asm.splitlines() and k["instructions"] == truth.instructions
    assert k["vector_width"] == truth.vector_width and k["isa"] == truth.isa
    assert k["locations"] == [
        {"label": loc.label, "key": str(LOOP_LINE)} for loc in truth.lines[0][1]
    ]
    assert str(LOOP_LINE) in report["lines"]  # the key the Source tab uses for that line
    # every instruction is covered once, in order, by the runs of location indices
    covered = [i for start, count, _ in k["at"] for i in range(start, start + count)]
    assert covered == list(range(len(k["asm"])))
    assert all(ids == [0] for _, _, ids in k["at"])
    assert "kernel" in k["mapping"]  # the panel says the mapping is per kernel
    # the matmul is a library call: no code, said why
    assert [x["name"] for x in report["extras"]["passes"]["kernels_without_code"]] == [
        f.name for f in comp.fusions if f.name != tanh
    ]


def many(x, y):
    a = jnp.tanh(x).sum(0)
    b = jnp.exp(y).max(1)
    c = jnp.sort(jnp.sin(x), axis=0)
    d = jnp.cumsum(jnp.cos(y), axis=1)
    e = (x @ y.T).sum()
    return a, b, c, d, jnp.log1p(jnp.abs(e))


@pytest.fixture(scope="module")
def plain():
    return nbcompile.compile(many, jnp.ones((64, 32)), jnp.ones((48, 32)))


def test_without_the_dump_there_is_no_passes_tab_until_passes_is_read(plain):
    before = plain.report()
    assert "passes" not in before["extras"]
    assert 'data-nbc-tab="passes"' not in fallback_html(before)
    assert plain.passes is not None  # one more compile, with XLA's dump
    after = plain.report()  # rebuilt: the dump is part of the report's state
    assert after is not before and after["extras"]["passes"]["steps"]
    assert unlabelled(after) == []


def _chart_svg(html: str) -> str:
    img = re.search(
        r'src="data:image/svg\+xml;base64,([^"]+)"[^>]*data-testid="nbc-passes-img"', html
    )
    assert img, "no pass chart"
    return base64.b64decode(img[1]).decode()


def test_the_static_fallback_shows_the_pass_table_chart_and_five_kernels_code(plain):
    plain.passes  # noqa: B018
    report = plain.report()
    p = report["extras"]["passes"]
    assert len(p["kernel_code"]) > 5
    html = fallback_html(report)
    section = html[html.index('<details data-nbc-tab="passes"') :]
    section = section[: section.index('<details data-nbc-tab="source"')]
    rows = re.findall(r'<tr data-step="(\d+)">', section)
    assert [int(r) for r in rows] == [s["index"] for s in p["steps"]]
    svg = _chart_svg(section)
    names = re.findall(r'<g data-kind="step" data-name="([^"]+)"', svg)
    assert names == [f"{s['index']} {s['pipeline']}/{s['name']}" for s in p["steps"]]
    assert "XLA's dump" in unescape(svg)  # the chart says where its figures come from
    shown = re.findall(r'data-testid="nbc-static-kernel-code" data-kernel="([^"]+)"', section)
    assert shown == [k["name"] for k in p["kernel_code"][:5]]
    for k in p["kernel_code"][:5]:
        assert all(escape(line) in section for line in k["asm"][:50])
    assert "Capstone" in section and "no debug locations" in section  # mapping: per kernel


def _log(diffs: list[str]) -> SimpleNamespace:
    steps = [
        SimpleNamespace(
            index=i,
            name="fusion" if i else "pipeline-start",
            pipeline="p",
            changed=bool(i),
            instructions=10 + i,
            fusions=i,
            added={"fusion": 1} if i else {},
            removed={},
        )
        for i in range(len(diffs))
    ]
    return SimpleNamespace(module="jit_f", steps=steps, diff=lambda i: diffs[i])


def test_a_long_diff_is_cut_at_a_line_end_and_says_its_length():
    long = "+%fused = f32[4] fusion(%x), kind=kLoop\n" + "".join(
        f"+  %line.{n} = f32[4] add(%a, %b)\n" for n in range(2000)
    )
    p = passes_json(_log(["", long]), kernels=["fused"])
    step = p["steps"][1]
    assert step["diff_chars"] == len(long) and len(step["diff"]) <= DIFF_CHARS
    assert step["diff"].endswith("\n") and long.startswith(step["diff"])
    assert step["formed"] == step["kernels"] == ["fused"] and step["formed_total"] == 1
    rewired = "-%old = f32[4] fusion(%x), kind=kLoop\n+%old = f32[4] fusion(%y), kind=kLoop\n"
    assert passes_json(_log(["", rewired + long]))["steps"][1]["formed"] == ["fused"]


def test_kernel_code_is_capped_to_the_costliest_with_code():
    fusions = [
        {"id": f"k{i}", "name": f"k{i}", "kind": "loop", "flops": float(i)} for i in range(30)
    ]
    fusions.append({"id": "dot", "name": "dot", "kind": "custom", "flops": 1e9})

    def code_of(name):
        if name in ("dot", "k29"):
            raise KeyError(name)
        return SimpleNamespace(
            name=name,
            symbol=name,
            isa="x86-64",
            instructions=1,
            vector_width=None,
            lines=[("ret", [])],
            mapping="kernel",
            shared_with=None,
        )

    out = metal_json(_log([""]), fusions, code_of, errors=(KeyError,))
    assert [k["name"] for k in out["kernel_code"]] == [
        f"k{i}" for i in range(28, 28 - MAX_KERNELS, -1)
    ]
    assert [x["name"] for x in out["kernels_without_code"]] == ["k29"]  # dots tried last


def test_kernel_code_reads_the_objects_symbol_tables_once(comp, monkeypatch):
    """Every kernel's look-up used to walk every object's symbol table (twice): a 12-layer
    train step took up to 0.65 s per kernel. Now the table is read once per dump."""
    from nbcompile.measure import metal

    comp._metal.functions = None
    calls = []
    walk = metal._functions
    monkeypatch.setattr(metal, "_functions", lambda objects: calls.append(1) or walk(objects))
    tanh = tanh_kernel(comp)
    first, again = comp.kernel_code(tanh), comp.kernel_code(tanh)
    assert first.asm == again.asm and first.instructions > 0
    with pytest.raises(nbcompile.NbcompileError):
        comp.kernel_code("no_such_kernel")
    assert len(calls) == 1


def test_shared_kernels_parse_the_optimised_module_once(plain, monkeypatch):
    """A fusion XLA compiled once with another is found by what it computes: that used to
    parse the whole optimised module on every look-up (0.3 s on a 12-layer train step)."""
    from nbcompile.measure import _kernel_code

    plain.passes  # noqa: B018
    plain._metal.signatures = plain._metal.module = None
    parsed = []
    parse = _kernel_code.parse_hlo
    monkeypatch.setattr(_kernel_code, "parse_hlo", lambda text: parsed.append(1) or parse(text))
    library = [f.name for f in plain.fusions if f.kind == "custom"]
    for _ in range(2):
        for name in library:
            with pytest.raises(nbcompile.NbcompileError):
                plain.kernel_code(name)
    assert library and len(parsed) == 1


def _formed_reference(diff: str) -> list[str]:
    """The fusions a diff forms, read by matching every line in full (the first version)."""
    whole = re.compile(r"^\+\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=.*?\bfusion\(")
    lines = diff.splitlines()
    gone = {m[1] for line in lines if (m := whole.match("+" + line[1:])) and line[0] == "-"}
    added = (m[1] for line in lines if line.startswith("+") and (m := whole.match(line)))
    return [name for name in dict.fromkeys(added) if name not in gone]


def test_the_fusions_formed_are_those_the_full_match_finds(comp):
    """``_formed`` matches only the diff lines that call a fusion: the same names as matching
    every line, on a real program's pass log and on lines made to mislead."""
    from nbcompile.report.metal import _formed

    log = comp.passes
    diffs = [log.diff(s.index) for s in log.steps if s.changed]
    assert any(_formed_reference(d) for d in diffs), "no step of this program formed a fusion"
    made_up = "\n".join(
        [
            "--- before",
            "+++ after",
            "+  ROOT %tuple.9 = (f32[4]) tuple(%fusion.2)",  # uses a fusion: defines none
            "+  ROOT %fusion.3 = f32[4] fusion(%p), kind=kLoop, calls=%fused_computation.3",
            "   %kept.1 = f32[4] fusion(%q), kind=kLoop, calls=%c",  # context, not added
            "-  %fusion.4 = f32[4] fusion(%a), kind=kLoop",
            "+  %fusion.4 = f32[4] fusion(%b), kind=kLoop",  # rewired, not formed
            "+%bare.2=f32[2]{0} fusion(f32[2]{0} %z), kind=kInput",
            "",
            "-",
            "+",
        ]
    )
    for diff in [*diffs, made_up]:
        assert _formed(diff) == _formed_reference(diff)
    assert _formed(made_up) == ["fusion.3", "bare.2"]
