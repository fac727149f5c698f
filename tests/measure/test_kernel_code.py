"""``c.kernel_code(name)``: a kernel's LLVM IR and machine code from XLA's own dump, disassembled
by Capstone, its instructions mapped to the cell's lines (nbcompile/measure/metal.py)."""

from __future__ import annotations

import platform

import jax.numpy as jnp
import pytest

from nbcompile.errors import NbcompileError
from nbcompile.measure.metal import MetalDump, kernel_code, vector_width
from nbcompile.targets import _resolve as resolve_module

from ._metal_cell import LOOP_LINE, compiled, tanh_kernel

x86 = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 only")


@pytest.fixture
def comp(shell):
    return compiled(shell)


@x86
def test_the_tanh_kernel_uses_vector_registers_and_maps_to_the_loop_line(comp):
    code = comp.kernel_code(tanh_kernel(comp))
    assert code.isa == "x86-64"
    assert any(reg in code.asm for reg in ("xmm", "ymm", "zmm"))
    assert code.vector_width in (128, 256, 512)
    assert code.instructions == len(code.lines) == len(code.asm.splitlines()) > 0
    assert [line for line, _ in code.lines] == code.asm.splitlines()
    lines = {loc.line for _, locations in code.lines for loc in locations}
    assert lines == {LOOP_LINE}  # kernel granularity: the loop's ops only, not the matmul's
    assert "define" in code.llvm_ir and f"@{code.symbol}(" in code.llvm_ir
    assert "!dbg" not in code.llvm_ir and "kernel" in code.mapping


def test_an_unknown_kernel_is_an_nbcompile_error_naming_the_kernels(comp):
    with pytest.raises(NbcompileError) as err:
        comp.kernel_code("no_such_kernel")
    assert err.value.code == "NBC600"
    assert tanh_kernel(comp) in str(err.value)
    assert "ynn_fusion" not in str(err.value)  # the matmul is a library call: no code


def test_tpu_says_the_compiler_is_closed():
    with pytest.raises(NbcompileError) as err:
        kernel_code(MetalDump(platform="tpu", passes=None), "fusion", [])
    assert err.value.code == "NBC600" and "closed" in str(err.value)


def test_vector_width_is_the_widest_register():
    assert vector_width(["vaddps ymm0, ymm1, ymm2", "movss xmm0, dword ptr [rax]"], "x86-64") == 256
    assert vector_width(["vaddps zmm0, zmm1, zmm2"], "x86-64") == 512
    assert vector_width(["mov rax, rbx"], "x86-64") is None
    assert vector_width(["fadd v0.4s, v1.4s, v2.4s"], "aarch64") == 128


@pytest.mark.skipif(
    not resolve_module._libtpu_available(),
    reason='libtpu is not installed (pip install "nbcompile[tpu]")',
)
def test_a_deviceless_tpu_compile_has_a_pass_log_but_no_kernel_code():
    import jax
    import jax.numpy as jnp

    import nbcompile

    def step(w, x):
        return jnp.tanh(x @ w) * 0.5

    w = jax.ShapeDtypeStruct((256, 256), jnp.float32)
    x = jax.ShapeDtypeStruct((128, 256), jnp.float32)
    comp = nbcompile.compile(step, w, x, backend="tpu", topology="v5e:1x1")
    assert comp.passes is not None and any(s.changed for s in comp.passes.steps)
    with pytest.raises(NbcompileError) as err:
        comp.kernel_code(comp.fusions[0].name)
    assert err.value.code == "NBC600" and "closed (libtpu)" in str(err.value)


def _twice(w, x):
    h = jnp.tanh(x @ w) * 2.0
    h = jnp.tanh(h @ w) * 2.0
    return jnp.sum(jnp.exp(h @ w), axis=0)


def test_a_fusion_compiled_once_for_two_shows_the_shared_code_at_its_own_line():
    """XLA:CPU compiles identical fusions once (the two ``tanh(...) * 2.0`` here): the second
    kernel has no symbol of its own, and its code is the first one's, at its own line."""
    import inspect

    import nbcompile

    w, x = jnp.ones((64, 64)), jnp.ones((32, 64))
    comp = nbcompile.compile(_twice, w, x)
    first_line = inspect.getsourcelines(_twice)[1] + 1
    tanh = [f for f in comp.fusions if "tanh" in f.ops]
    assert len(tanh) == 2
    codes = [comp.kernel_code(f.name) for f in tanh]
    shared = [c for c in codes if c.shared_with is not None]
    if not shared:
        pytest.skip("this XLA compiled both fusions (checked sharing with JAX 0.10.2)")
    [copy] = shared
    [original] = [c for c in codes if c.shared_with is None]
    assert copy.shared_with == original.name and copy.asm == original.asm
    assert "once" in copy.mapping
    lines = {c.name: {loc.line for _, locs in c.lines[:1] for loc in locs} for c in codes}
    assert lines[original.name] == {first_line} and lines[copy.name] == {first_line + 1}
