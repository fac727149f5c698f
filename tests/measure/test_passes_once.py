"""``--passes`` records XLA's pass pipeline from the program's own compile: one XLA compile for
the cell, ``c.passes`` / ``c.kernel_code`` / ``c.compile_time`` and later calls included; a
re-run served by nbcompile's cache keeps the passes; without ``--passes`` they cost one more
compile, as before (nbcompile/stages/__init__.py ``run_stages(dump=True)``,
nbcompile/measure/metal.py ``read_stages_dump``)."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nbcompile

from ..helpers import XlaCompiles
from ..test_persistent_cache import cache_dir  # noqa: F401 - the fixture, shared

COMPILES = XlaCompiles()  # compiles asked of JAX

SETUP = """
import jax, jax.numpy as jnp
w = jnp.full((24, 24), 0.01); x = jnp.ones((8, 24))
"""

CELL = """%%compile -q --passes
def once_step(w, x):
    h = x @ w
    for _ in range(5):
        h = jnp.sin(h) * 0.5 + h
    return h
once_step(w, x)
"""


def _tanh_program(x):
    return jnp.tanh(x * 3.0 + 0.25) * 2.0


def test_a_passes_cell_compiles_the_program_once(shell):
    shell.reset(new_session=False)
    assert shell.run_cell(SETUP).success
    before = COMPILES.count
    result = shell.run_cell(CELL.replace("-q", "-f -q"))
    assert result.success, result.error_in_exec
    comp = nbcompile.last()
    assert comp.stages.xla_compiles == 1
    log = comp.passes
    assert log is not None and log.steps, "the compile's own dump holds XLA's passes"
    kernel = next(f.name for f in comp.fusions if "sine" in f.ops)
    assert comp.kernel_code(kernel).instructions > 0
    ct = comp.compile_time
    assert ct.xla is not None and ct.codegen is not None
    # the rebound function runs the executable compiled with the dump: no compile either
    out = shell.run_cell("once_out = once_step(w, x)")
    assert out.success, out.error_in_exec
    assert COMPILES.count - before == 1, "--passes compiled the program more than once"
    expected = np.asarray(shell.user_ns["x"]) @ np.asarray(shell.user_ns["w"])
    for _ in range(5):
        expected = np.sin(expected) * 0.5 + expected
    np.testing.assert_allclose(np.asarray(shell.user_ns["once_out"]), expected, rtol=1e-5)
    assert comp._metal is comp.program.metal and comp._metal.own
    assert any("this very compile" in note for note in ct.notes), ct.notes


def test_a_rerun_served_by_the_cell_cache_keeps_the_passes(shell):
    shell.reset(new_session=False)
    assert shell.run_cell(SETUP).success
    assert shell.run_cell(CELL.replace("-q", "-f -q")).success
    first = nbcompile.last()
    before = COMPILES.count
    again = shell.run_cell(CELL)  # unchanged: nbcompile's cache serves the Program
    assert again.success, again.error_in_exec
    comp = nbcompile.last()
    assert comp.cache_hit and comp is not first
    assert comp._metal is first._metal, "--passes on a cache hit reuses the Program's dump"
    assert comp.passes.steps == first.passes.steps
    assert COMPILES.count == before, "a cache hit of a --passes cell compiled again"


def test_the_api_spelling_and_the_dump_folder_is_removed(monkeypatch):
    from nbcompile.measure import metal

    folders = []
    read = metal.read_dump

    def recording(folder, *args, **kwargs):
        folders.append(str(folder))
        return read(folder, *args, **kwargs)

    monkeypatch.setattr(metal, "read_dump", recording)
    x = jnp.ones((4, 16), jnp.float32)
    before = COMPILES.count
    c = nbcompile.compile(_tanh_program, x, passes=True)
    assert c.program.metal is not None and c.stages.dump is None, "read with the Compilation"
    assert len(folders) == 1 and not os.path.exists(folders[0]), "the dump folder is left"
    assert c.passes is not None and c.passes.steps
    assert c.compile_time.total > 0
    assert COMPILES.count - before == 1


def test_without_passes_they_cost_one_more_compile():
    x = jnp.ones((4, 16), jnp.float32)

    def program(v):
        return jnp.cos(v * 1.5) + 0.5

    before = COMPILES.count
    c = nbcompile.compile(program, x)
    assert c.stages.dump is None and c.program.metal is None
    assert COMPILES.count - before == 1
    assert c.passes is not None and c.passes.steps  # on demand
    assert COMPILES.count - before == 2
    assert not c._metal.own
    assert not any("this very compile" in note for note in c.compile_time.notes)


def test_a_program_in_the_persistent_cache_is_still_dumped(shell, cache_dir):  # noqa: F811
    """A persistent-cache hit runs no XLA and dumps nothing: the --passes compile skips the
    cache (that compile only: the next plain compile of the program is served again)."""
    shell.reset(new_session=False)
    assert shell.run_cell(SETUP, store_history=True).success
    plain = CELL.replace("-q --passes", "-f -q")
    compiles = []
    for cell in (plain, plain, CELL.replace("-q", "-f -q"), plain):
        result = shell.run_cell(cell, store_history=True)
        assert result.success, result.error_in_exec
        compiles.append(nbcompile.last().stages.xla_compiles)
    assert compiles == [1, 0, 1, 0], f"XLA compiles per run: {compiles}"
    assert nbcompile.last().stages.dump is None
    assert shell.run_cell(CELL.replace("-q", "-f -q"), store_history=True).success
    assert nbcompile.last().passes.steps


def _libtpu() -> bool:
    from nbcompile.targets import _resolve as resolve_module

    return resolve_module._libtpu_available()


@pytest.mark.skipif(not _libtpu(), reason='libtpu is not installed (pip install "nbcompile[tpu]")')
def test_a_deviceless_tpu_compile_dumps_its_own_passes():
    from nbcompile.errors import NbcompileError

    def step(w, x):
        return jnp.tanh(x @ w) * 0.25

    w = jax.ShapeDtypeStruct((128, 128), jnp.float32)
    x = jax.ShapeDtypeStruct((64, 128), jnp.float32)
    before = COMPILES.count
    comp = nbcompile.compile(step, w, x, backend="tpu", topology="v5e:1x1", passes=True)
    assert comp.stages.xla_compiles == 1 and comp.program.metal.own
    assert comp.passes is not None and any(s.changed for s in comp.passes.steps)
    assert comp.compile_time.xla is not None
    with pytest.raises(NbcompileError) as err:
        comp.kernel_code(comp.fusions[0].name)
    assert err.value.code == "NBC600"
    assert COMPILES.count - before == 1


def test_the_dump_reads_the_analysis_parse_of_the_optimised_module(monkeypatch):
    """``--passes``: the kernels' look-ups (their code, the library calls the view names) read
    the optimised module the analysis parsed, not a second parse of the same text; what they
    answer is what a fresh parse answers."""
    from nbcompile.analysis import hlo as hlo_mod
    from nbcompile.measure import _kernel_code

    w, x = jnp.full((24, 24), 0.01), jnp.ones((8, 24))

    def looked_up(w, x):
        h = x @ w
        for _ in range(4):
            h = jnp.sin(h) * 0.5 + h
        return h.sum(axis=1)

    c = nbcompile.compile(looked_up, w, x, passes=True)
    c.analysis  # noqa: B018
    dump = c._metal_dump()
    assert dump.module is not None and dump.module[0] == c.hlo, "the analysis kept no parse"
    parses = []
    real = hlo_mod.parse_hlo
    monkeypatch.setattr(_kernel_code, "parse_hlo", lambda text: parses.append(text) or real(text))
    names = [f.name for f in c.fusions]
    kernel = next(f.name for f in c.fusions if "sine" in f.ops)
    code = c.kernel_code(kernel)
    notes = {n: c._library_call(n) for n in names}
    assert parses == [], "the optimised module was parsed again"
    # the same answers from a dump that parses the text afresh
    dump.module, dump.signatures = None, None
    assert {n: c._library_call(n) for n in names} == notes
    assert len(parses) == 1, "a dump without the analysis's parse parses the module once"
    again = c.kernel_code(kernel)
    assert (again.symbol, again.asm, again.shared_with) == (code.symbol, code.asm, code.shared_with)
