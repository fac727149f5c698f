"""``c.kernel_code`` of kernels XLA:CPU hands to a library (issue 39 item 5, nbcompile/measure/
_library.py): the user's element-wise chain that YNNPACK runs gets XLA's own code for the same
ops, compiled on request with YNNPACK off and labelled as not what runs, mapped to the loop's
line; a YNNPACK dot names the library and its kernel functions. Runs on both stacks (jaxlib
0.10.2 and 0.12.0.1)."""

from __future__ import annotations

import platform

import pytest

import nbcompile
from nbcompile.errors import NbcompileError

from ..helpers import XlaCompiles
from ._metal_cell import (
    CHAIN_LOOP_LINE,
    CHAIN_MATMUL_LINE,
    CHAIN_SUM_LINE,
    chain_compiled,
    chain_kernel,
)

x86 = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 only")
COMPILES = XlaCompiles()


@pytest.fixture
def chain(shell):
    return chain_compiled(shell)


@x86
def test_the_tanh_chain_ynnpack_runs_gets_xla_code_with_ynnpack_off_at_the_loop_line(chain):
    kernel = chain_kernel(chain)
    # what makes this case: XLA handed the whole chain to YNNPACK (no code of XLA's own)
    assert kernel.kind == "custom" and kernel.name.startswith("ynn_fusion")
    before = COMPILES.count
    code = chain.kernel_code(kernel.name)
    assert COMPILES.count - before == 1, "one more compile, with YNNPACK off, on request"
    assert code.library == "YNNPACK" and code.runs is False
    assert "YNNPACK off" in code.source and "not what runs" in code.source
    assert "not what runs" in code.mapping and code.stand_in
    assert code.isa == "x86-64" and code.instructions > 0 and code.vector_width
    asm = code.asm.splitlines()
    assert [line for line, _ in code.lines] == asm
    headers = [line for line in asm if line.startswith(";")]
    assert len(headers) == len(code.stand_in) and code.instructions == len(asm) - len(headers)
    assert all(k in code.asm for k in code.stand_in)
    assert any(reg in code.asm for reg in ("xmm", "ymm", "zmm"))
    lines = {loc.line for _, locations in code.lines for loc in locations}
    assert CHAIN_LOOP_LINE in lines and CHAIN_MATMUL_LINE not in lines
    assert lines <= {CHAIN_LOOP_LINE, CHAIN_SUM_LINE}
    assert "define" in (code.llvm_ir or "")
    # asked again: the library-off compile is kept
    again = chain.kernel_code(kernel.name)
    assert again.asm == code.asm and COMPILES.count - before == 1
    assert "YNNPACK runs it" in repr(code)


def test_a_ynnpack_dot_names_the_library_and_its_kernels(chain):
    dot = next(f for f in chain.fusions if f.kind == "custom" and "dot" in f.ops)
    before = COMPILES.count
    with pytest.raises(NbcompileError) as err:
        chain.kernel_code(dot.name)
    text = str(err.value)
    assert err.value.code == "NBC600" and "YNNPACK" in text and dot.name in text
    assert "dot f32[32,64] x f32[64,64]" in text
    if platform.system() == "Linux":  # jaxlib's libjax_common.so keeps its symbol table
        assert "ynn::dot_fp32_" in text and "libjax_common.so" in text
    assert COMPILES.count == before, "a dot gets no stand-in compile"


def test_the_view_compiles_nothing_and_shows_the_stand_in_once_asked(chain):
    kernel = chain_kernel(chain).name
    before = COMPILES.count
    p = chain.report()["extras"]["passes"]
    assert COMPILES.count == before, "the report does not compile with YNNPACK off itself"
    why = {k["name"]: k["why"] for k in p["kernels_without_code"]}
    assert f"c.kernel_code('{kernel}')" in why[kernel] and "YNNPACK off" in why[kernel]
    assert kernel not in {k["name"] for k in p["kernel_code"]}
    chain.kernel_code(kernel)
    p = chain.report()["extras"]["passes"]
    [shown] = [k for k in p["kernel_code"] if k["name"] == kernel]
    assert shown["library"] == "YNNPACK" and shown["stand_in"]
    assert "not what runs" in shown["source"]


def test_the_static_page_labels_the_stand_in(chain):
    from nbcompile.report.passesfig import passes_html

    kernel = chain_kernel(chain).name
    chain.kernel_code(kernel)
    page = passes_html(chain.report())
    assert "YNNPACK runs it: XLA&#x27;s own code for its ops" in page or (
        "YNNPACK runs it: XLA's own code for its ops" in page
    )


def _cumsums(*xs):
    import jax.numpy as jnp

    return [jnp.cumsum(x) for x in xs]


def test_every_one_of_many_identical_fusions_has_the_shared_code():
    """Issue 41: 40 identical ``wrapped_reduce-window.N`` fusions (one per cumsum) call copies
    of the same reduction (``to_apply=%region_0.1`` / ``%region_0.1.clone``): XLA compiles them
    once, and every one of them gets that code (19 of 40 raised NBC600)."""
    import jax.numpy as jnp

    xs = [jnp.arange(128.0) * i for i in range(40)]
    comp = nbcompile.compile(_cumsums, *xs)
    windows = [f.name for f in comp.fusions if "reduce-window" in f.ops]
    assert len(windows) >= 40
    codes = [comp.kernel_code(name) for name in windows]
    assert all(c.instructions > 0 for c in codes)
    shared = [c for c in codes if c.shared_with]
    assert shared, "XLA compiled identical fusions once (jaxlib 0.10.2 and 0.12.0.1)"
    originals = {c.name: c.asm for c in codes if not c.shared_with}
    assert all(originals[c.shared_with] == c.asm for c in shared)


def test_a_huge_name_is_not_echoed_in_full(chain):
    name = "x" * 10**6
    with pytest.raises(NbcompileError) as err:
        chain.kernel_code(name)
    assert err.value.code == "NBC600" and len(str(err.value)) < 2_000
    assert "1,000,000 characters" in str(err.value)


def test_a_name_that_is_not_a_string_is_an_nbcompile_error(chain):
    with pytest.raises(NbcompileError) as err:
        chain.kernel_code(3)
    assert err.value.code == "NBC600" and "int" in str(err.value)


def _conv(x, k):
    import jax

    return jax.nn.relu(jax.lax.conv_general_dilated(x, k, (1, 1), "SAME"))


def test_a_convolution_names_the_library_and_its_kernel():
    """XLA:CPU leaves a convolution unfused (YNNPACK takes dots only, by default) and its
    runtime runs it with Eigen: the error names Eigen and the kernel function."""
    import jax.numpy as jnp

    from nbcompile.analysis.hlo import parse_hlo

    comp = nbcompile.compile(_conv, jnp.ones((2, 8, 16, 16)), jnp.ones((4, 8, 3, 3)))
    entry = parse_hlo(comp.hlo).entry_computation
    [conv] = [i for i in entry.instructions if i.opcode == "convolution"]  # 0.10.2 and 0.12
    with pytest.raises(NbcompileError) as err:
        comp.kernel_code(conv.name)
    text = str(err.value)
    assert err.value.code == "NBC600" and "convolution f32[2,16,16,8]" in text
    assert "Eigen library call" in text and "EigenConv2D<float>" in text
