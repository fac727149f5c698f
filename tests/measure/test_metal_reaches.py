"""Every XLA internal "down to the metal" relies on, checked against the jaxlib installed here
(``make test`` on 0.12.x, ``make test-compat`` on 0.10.2): XLA debug option names, the dump's
file layout and XLA:CPU's library fusions (nbcompile/_compat.py, the section "XLA:CPU's dump
and library fusions"). Each failure names the reach that broke, so a new jaxlib that moves one
fails here loudly instead of leaving ``c.passes`` None or ``c.kernel_code`` without code."""

from __future__ import annotations

import platform
import re

import jax
import jax.numpy as jnp
import pytest

from nbcompile._compat import (
    LIBRARY_FUSION_KINDS,
    LIBRARY_FUSIONS_OFF,
    jaxlib_native_library,
    persistent_cache_disabled,
    xla_dump_options,
)
from nbcompile.analysis.hlo import parse_hlo
from nbcompile.analysis.passes_log import step_files


def _chain(z):
    for _ in range(4):
        z = jnp.tanh(z) * 0.5 + 0.25
    return z.sum()


def _lowered():
    return jax.jit(_chain).lower(jnp.ones((256, 256)))


def _loop(z):
    return jnp.tanh(z) * 0.5 + z


def test_reach_dump_layout(tmp_path):
    """``xla_dump_options('cpu')``: every option accepted by this XLA, and the dump holds the
    pass steps (``module_N.<name>.NNNN.<pipeline>.after_<pass>...txt``), the module before
    optimisations, the kernels' object files and their optimised LLVM IR."""
    lowered = jax.jit(_loop).lower(jnp.ones((64, 64)))
    options = {"xla_dump_to": str(tmp_path), **xla_dump_options("cpu")}
    with persistent_cache_disabled():
        try:
            lowered.compile(compiler_options=options)
        except Exception as err:  # say which reach broke
            pytest.fail(f"reach xla_dump_options: this XLA refuses one of {options}: {err}")
    names = [p.name for p in tmp_path.iterdir()]
    _, steps = step_files(tmp_path)
    assert steps, f"reach pass-step file names (analysis/passes_log.py _STEP_FILE): {names[:5]}"
    assert any(n.endswith(".before_optimizations.txt") for n in names), (
        "reach module_N.<name>.before_optimizations.txt"
    )
    assert any(re.search(r"obj-file\..*\.o$", n) for n in names), "reach obj-file.*.o"
    assert any(n.endswith(".ir-with-opt.ll") for n in names), (
        "reach *.ir-with-opt.ll: XLA:CPU wrote no optimised LLVM IR with "
        "xla_dump_emitter_re=llvm (_compat.xla_dump_options)"
    )


def _library_fusions(text: str) -> list[str]:
    module = parse_hlo(text)
    entry = module.entry_computation
    return [
        m.group(1)
        for i in entry.instructions
        if i.opcode == "fusion" and i.kind == "custom"
        for m in [re.search(r'"kind"\s*:\s*"(__\w+)"', i.text)]
        if m
    ]


def test_reach_ynnpack_fuses_an_elementwise_chain_and_its_sum():
    """XLA:CPU hands a tanh chain and the sum of it to YNNPACK as one kCustom fusion whose
    backend_config names it (``"fusion_config":{"kind":"__ynn_fusion"}``):
    ``_compat.LIBRARY_FUSION_KINDS``. If this XLA no longer does, the library tests below test
    nothing: update the kinds and the docs (docs/metal.md)."""
    kinds = _library_fusions(_lowered().compile().as_text())
    assert kinds, "reach: XLA:CPU no longer hands the tanh chain + sum to a library"
    assert all(k in LIBRARY_FUSION_KINDS for k in kinds), f"reach fusion_config kinds: {kinds}"


def test_reach_library_fusions_off():
    """``_compat.LIBRARY_FUSIONS_OFF``: every option accepted, and with them the program has no
    library fusion, its ops keeping the names they had (how measure/_library.py matches a
    library fusion with XLA's own kernels for the same ops)."""
    lowered = _lowered()
    on = lowered.compile().as_text()
    try:
        off = lowered.compile(compiler_options=LIBRARY_FUSIONS_OFF).as_text()
    except Exception as err:  # say which reach broke
        pytest.fail(f"reach LIBRARY_FUSIONS_OFF: this XLA refuses one of them: {err}")
    assert not _library_fusions(off), "reach: the options no longer turn YNNPACK off"
    tanh_on = {i.name for c in parse_hlo(on).computations.values() for i in c.instructions}
    tanh_off = {i.name for c in parse_hlo(off).computations.values() for i in c.instructions}
    tanh_on = {n for n in tanh_on if n.startswith("tanh")}
    assert tanh_on and tanh_on <= tanh_off, "reach: instruction names differ across the compiles"


@pytest.mark.skipif(platform.system() != "Linux", reason="jaxlib's ELF library: Linux")
def test_reach_jaxlib_library_keeps_ynnpack_symbols():
    """``_compat.jaxlib_native_library``: jaxlib's libjax_common.so, whose symbol table names
    YNNPACK's dot kernels (``ynn::dot_fp32_...``), as a library call's error names them."""
    from nbcompile.measure._library import library_functions

    path = jaxlib_native_library()
    assert path is not None, "reach jaxlib/libjax_common.so: not in this jaxlib"
    library_functions.cache_clear()
    names, where = library_functions("YNNPACK", "dot_fp32")
    assert where == path and names, "reach: no ynn::dot_fp32_* in libjax_common.so's symbols"
