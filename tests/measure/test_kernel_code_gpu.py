"""``c.kernel_code(name)`` on a CUDA GPU: the kernel's PTX, cut out of XLA:GPU's dump
(nbcompile/measure/metal.py), compiled deviceless with the CUDA plugin.

The deviceless tests (``gpu_deviceless``) need the JAX CUDA plugin and skip without it; run them
with ``PYTHONPATH=build/cuda-plugin JAX_PLATFORMS=cpu .venv/bin/pytest -q -m gpu_deviceless
tests/measure/test_kernel_code_gpu.py`` (or ``make test-gpu-deviceless``). The PTX readers'
own tests below need nothing.
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import pytest

from nbcompile.errors import NbcompileError
from nbcompile.measure import metal
from nbcompile.measure.metal import MetalDump, kernel_code, vector_width
from nbcompile.targets import _resolve as resolve_module

from ._metal_cell import LOOP_LINE, MATMUL_LINE, SETUP

needs_cuda_plugin = pytest.mark.skipif(
    not resolve_module._cuda_plugin_available(),
    reason=f'needs the JAX CUDA plugin: pip install "jax[cuda12]=={jax.__version__}"',
)
deviceless = [pytest.mark.gpu_deviceless, needs_cuda_plugin]


def _step(w, x):
    h = x @ w
    for _ in range(24):
        h = jnp.tanh(h) * 0.5 + h
    return h


def _elementwise(x, y):
    return jnp.tanh(x) * 0.5 + y


def _line(fn, offset: int) -> int:
    return inspect.getsourcelines(fn)[1] + offset


@pytest.fixture(scope="module")
def h100():
    import nbcompile

    w, x = jnp.ones((64, 64)) * 0.01, jnp.ones((32, 64))
    return nbcompile.compile(_step, w, x, backend="gpu", gpu="h100")


def _lines_of(code) -> set[int]:
    return {loc.line for _, locations in code.lines for loc in locations}


@pytest.mark.gpu_deviceless
@needs_cuda_plugin
def test_a_loop_fusion_has_its_ptx_entry_mapped_to_the_loop_line(h100):
    [name] = [f.name for f in h100.fusions if "tanh" in f.ops and "dot" not in f.ops]
    code = h100.kernel_code(name)
    assert code.isa.startswith("ptx sm_90")  # H100: sm_90a
    asm = code.asm.splitlines()
    assert f".entry {code.symbol}(" in asm[0] and asm[-1] == "}"
    assert "ld.global" in code.asm and "st.global" in code.asm
    assert ".f32" in code.asm  # the loop's float arithmetic
    assert [line for line, _ in code.lines] == asm
    mapped = [line for line, locations in code.lines if locations]
    assert code.instructions == len(mapped) > 24  # one per instruction, none for directives
    assert not any(line.strip().startswith((".reg", "{", "}")) for line in mapped)
    assert _lines_of(code) == {_line(_step, 3)}  # the loop's ops only, not the matmul's
    assert f"@{code.symbol}(" in code.llvm_ir and "!dbg" not in code.llvm_ir
    assert code.mapping.startswith("kernel:") and ".loc" in code.mapping
    assert "PTX" in code.source and code.shared_with is None


@pytest.mark.gpu_deviceless
@needs_cuda_plugin
def test_the_triton_gemm_fusion_has_ptx_mapped_to_the_matmul_line(h100):
    [name] = [f.name for f in h100.fusions if "dot" in f.ops]
    code = h100.kernel_code(name)
    assert code.symbol == name.replace(".", "_") and f".entry {code.symbol}(" in code.asm
    assert "ld.global" in code.asm and "st.global" in code.asm
    assert _lines_of(code) == {_line(_step, 1)}


@pytest.mark.gpu_deviceless
@needs_cuda_plugin
def test_a_large_elementwise_kernel_uses_vector_loads():
    import nbcompile

    x = jax.ShapeDtypeStruct((1024, 1024), jnp.float32)
    comp = nbcompile.compile(_elementwise, x, x, backend="gpu", gpu="h100")
    [fusion] = comp.fusions
    code = comp.kernel_code(fusion.name)
    assert ".v4.b32" in code.asm or ".v2.b32" in code.asm
    assert code.vector_width in (64, 128, 256)
    assert repr(code).endswith(f"{code.vector_width}-bit vectors>")


@pytest.mark.gpu_deviceless
@needs_cuda_plugin
def test_an_unknown_gpu_kernel_is_an_nbcompile_error_naming_the_kernels(h100):
    with pytest.raises(NbcompileError) as err:
        h100.kernel_code("no_such_kernel")
    assert err.value.code == "NBC600" and "no PTX" in str(err.value)
    assert all(f.name in str(err.value) for f in h100.fusions)


@pytest.mark.gpu_deviceless
@needs_cuda_plugin
def test_the_gpu_pass_log_is_the_programs_module(h100):
    """XLA:GPU dumps a module of its own beside the program's (``fused_add``, numbered after it,
    checked with JAX 0.10.2): the pass log is still the program's, and its last step counts
    what ``c.hlo`` holds."""
    from nbcompile.analysis.hlo import count_opcodes, parse_hlo

    log = h100.passes
    assert log.module.startswith("jit_") and len(log.steps) > 10
    assert log.steps[-1].instructions == parse_hlo(h100.hlo).instruction_count()
    assert log.steps[-1].fusions == count_opcodes(h100.hlo)["fusion"] == len(h100.fusions)
    assert any(s.changed and "fusion" in s.name and s.fusions > 0 for s in log.steps)


@pytest.mark.gpu_deviceless
@needs_cuda_plugin
def test_the_magic_for_a_gpu_target_shows_a_kernels_ptx_by_line(shell):
    import nbcompile

    shell.reset(new_session=False)
    assert shell.run_cell(SETUP).success
    cell = (
        "%%compile -f -q --passes --backend gpu --target h100\n"
        "def step(w, x):\n"
        "    h = x @ w\n"
        "    for _ in range(24):\n"
        "        h = jnp.tanh(h) * 0.5 + h\n"
        "    return h\n"
        "step(w, x)\n"
    )
    result = shell.run_cell(cell)
    assert result.success, result.error_in_exec
    comp = nbcompile.last()
    assert comp.backend == "cuda" and comp._metal is not None
    codes = {f.name: comp.kernel_code(f.name) for f in comp.fusions}
    loop = next(c for n, c in codes.items() if n.startswith("loop_"))
    gemm = next(c for n, c in codes.items() if n.startswith("gemm_"))
    assert loop.isa.startswith("ptx") and ".entry" in loop.asm
    assert {loc.line for _, locs in loop.lines for loc in locs} == {LOOP_LINE}
    assert {loc.line for _, locs in gemm.lines for loc in locs} == {MATMUL_LINE}


# --- the PTX readers, on PTX text (no plugin needed) ----------------------------------------

PTX = """//
// Generated by LLVM NVPTX Back-End
//

.version 8.8
.target sm_90a
.address_size 64

\t// .globl\tk_1
.visible .entry k_1(
\t.param .u64 .ptr .align 16 k_1_param_0
)
.reqntid 64, 1, 1
{
\t.reg .b32 \t%r<9>;
\t// a comment with a brace {
\tld.global.nc.v4.b32 \t{%r1, %r2, %r3, %r4}, [%rd1];
$L__BB0_1:
\t{
\t.reg .pred %p1;
\t@%p1 st.global.v2.b32 \t[%rd1], {%r1, %r2};
\t}
\t// begin inline asm
\tmov.u32 %r5, 0x0; @%p1 ld.global.v8.b32 { %r1, %r2, %r3, %r4, %r5, %r6, %r7, %r8 }, [ %rd1 + 0 ];
\t// end inline asm
\tret;

}
\t// .globl\tk_2
.visible .entry k_2()
{
\tst.global.b32 \t[%rd1], %r1;
\tret;
}
"""


def test_a_ptx_entry_is_cut_at_its_matching_brace():
    dump = MetalDump(platform="cuda", passes=None, ptx={"m.1.ptx": PTX})
    code = kernel_code(dump, "k.1", ["line 3"], kernels=["k.1", "k.2"])
    asm = code.asm.splitlines()
    assert asm[0] == ".visible .entry k_1(" and asm[-1] == "}" and "k_2" not in code.asm
    assert code.isa == "ptx sm_90a" and code.symbol == "k_1"
    assert code.instructions == 5  # ld, the predicated st, the inline asm's mov and ld, ret
    assert code.vector_width == 256 and code.llvm_ir is None  # the inline asm's .v8.b32
    mapped = [line.strip() for line, where in code.lines if where == ["line 3"]]
    assert [line.split()[0] for line in mapped] == [
        "ld.global.nc.v4.b32",
        "@%p1",
        "mov.u32",
        "ret;",
    ]
    other = kernel_code(dump, "k.2", [], kernels=["k.1", "k.2"])
    assert other.instructions == 2 and other.vector_width is None


def test_ptx_vector_width_is_the_widest_vector_access():
    assert vector_width(["\tld.global.nc.v4.b32 \t{%r1, %r2, %r3, %r4}, [%rd1];"], "ptx") == 128
    assert vector_width(["\tst.shared.v2.f64 \t[%rd1], {%fd1, %fd2};"], "ptx sm_80") == 128
    assert vector_width(["\t@!%p2 ld.global.v2.b32 \t{%r1, %r2}, [%rd1];"], "ptx") == 64
    assert vector_width(["\tld.global.b32 \t%r1, [%rd1];", "\tmov.b32 %r1, %r2;"], "ptx") is None


def test_no_ptx_in_a_gpu_dump_is_an_nbcompile_error():
    with pytest.raises(NbcompileError) as err:
        kernel_code(MetalDump(platform="cuda", passes=None), "fusion", [])
    assert err.value.code == "NBC600" and "no PTX" in str(err.value)


def test_only_the_programs_module_is_kept_in_the_dump(tmp_path):
    names = [
        "module_0666.jit_step.before_optimizations.txt",
        "module_0666.jit_step.0001.optimization.after_pipeline-start.before_dce.txt",
        "module_0666.jit_step.1.ptx",
        "module_0668.fused_add.0000.cublaslt_rewriter_pipeline.after_pipeline-start.txt",
    ]
    for name in names:
        (tmp_path / name).write_text("")
    metal._keep_program_module(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[:3])


def test_a_tpu_modules_dotted_name_and_folder_are_kept(tmp_path):
    """libtpu names its module ``jit_step.cl_<n>`` and writes a folder of that name."""
    (tmp_path / "module_0003.jit_step.cl_1014260217").mkdir()
    names = [
        "module_0003.jit_step.cl_1014260217.before_optimizations.txt",
        "module_0003.jit_step.cl_1014260217.0001.tpu.after_pipeline-start.before_dce.txt",
    ]
    for name in names:
        (tmp_path / name).write_text("")
    metal._keep_program_module(tmp_path)
    assert len(list(tmp_path.iterdir())) == 3
