"""The pre-optimisation HLO converted beside XLA's compile (``nbcompile._compat.EarlyHlo``):
the same text the analysis would convert itself, used by the analysis, and nothing done (or an
error raised where the analysis asks) when it cannot be."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import jax
import pytest

import nbcompile
from benchmarks.models import transformer_train_step
from nbcompile import _compat
from nbcompile._compat import EarlyHlo, persistent_cache_disabled
from nbcompile.analysis.core import count_instructions


def _slow_enough_program():
    """A train step whose XLA compile takes well over EarlyHlo.STILL (~0.2 s here), in shapes
    no other test compiles (an executable from JAX's persistent cache is not compiled)."""
    return transformer_train_step(n_layers=2, d=136, seq=24, heads=4)


@pytest.fixture(autouse=True)
def _real_compiles():
    with persistent_cache_disabled():
        yield


def backend_compile_and_load(seconds: float) -> None:
    """Stands in for JAX's function of this name: sits in C (``time.sleep``) like XLA."""
    time.sleep(seconds)


def _compile_outlasts(monkeypatch, done) -> None:
    """XLA's compile lasts until ``done`` is set (at most 60 s): the early thread then always
    finishes beside it, however busy the machine (beside two CPU burners a 0.5 s compile ended
    before the thread, then niced, had converted the module). The stand-in
    sits in ``time.sleep`` under JAX's own function name, as the real compile sits in C."""
    from jax._src import compiler

    real = compiler.backend_compile_and_load

    def backend_compile_and_load(*args, **kwargs):
        deadline = time.monotonic() + 60.0
        while not done.is_set() and time.monotonic() < deadline and _early_thread_alive():
            time.sleep(0.05)
        return real(*args, **kwargs)

    monkeypatch.setattr(compiler, "backend_compile_and_load", backend_compile_and_load)


def _early_thread_alive() -> bool:
    """An EarlyHlo thread waits beside this compile (not a compile of JAX's own helpers)."""

    return any(t.name == "nbcompile-early-hlo" and t.is_alive() for t in threading.enumerate())


def test_text_converted_during_the_compile_is_jaxs_own():
    fn, args = _slow_enough_program()
    c = nbcompile.compile(fn, *args)
    early = c.stages.early_hlo
    assert early is not None
    text = early.text()
    assert text is not None and early.cpu_seconds > 0
    assert text == c.lowered.compiler_ir("hlo").as_hlo_module().to_string()
    assert early.text() is None  # handed out once: the text is not kept alive


def test_analysis_uses_the_early_text(monkeypatch):
    fn, args = _slow_enough_program()
    c = nbcompile.compile(fn, *args)
    want = count_instructions(c.lowered.compiler_ir("hlo").as_hlo_module().to_string())
    # the analysis must not convert again: make JAX's own conversion fail if it is asked
    lowered = c.lowered
    monkeypatch.setattr(type(lowered), "compiler_ir", _refuse_hlo(type(lowered).compiler_ir))
    assert c.analysis.counts["hlo_ops_before"] == want
    assert c.analysis.timings["analyse.pre_optimisation"] < 5.0


def _refuse_hlo(original):
    def compiler_ir(self, dialect=None):
        if dialect == "hlo":
            raise AssertionError("converted again although the early text was there")
        return original(self, dialect)

    return compiler_ir


def test_nothing_is_converted_when_the_compile_never_reaches_xla():
    lowered = jax.jit(lambda x: x * 2).lower(1.0)
    early = EarlyHlo(lowered)
    early.compile_done()  # e.g. an executable from JAX's cache: no XLA compile to sit beside
    assert early.text() is None and early.cpu_seconds == 0.0
    assert early._bytecode == b""  # a cached Program does not keep the module's bytes


def test_a_conversion_error_is_raised_where_the_analysis_asks(monkeypatch):
    from jax._src.lib import _jax

    def broken(*_, **__):
        raise ValueError("conversion failed")

    monkeypatch.setattr(_jax.mlir, "mlir_module_to_xla_computation", broken)
    early = EarlyHlo(jax.jit(lambda x: x + 1).lower(1.0))
    backend_compile_and_load(0.3)
    early.compile_done()
    with pytest.raises(ValueError, match="conversion failed"):
        early.text()


def test_the_thread_waits_while_the_compiling_thread_runs_python():
    early = EarlyHlo(jax.jit(lambda x: x + 1).lower(1.0))
    deadline = time.perf_counter() + 0.3
    while time.perf_counter() < deadline:  # busy in Python, not in a compile
        pass
    early.compile_done()
    assert early.text() is None
    assert _compat.EarlyHlo.STILL < 0.3


def test_the_traced_analysis_is_made_beside_the_compile_and_used(monkeypatch):
    """The traced graph (and the pre-optimisation module) are made in the early thread while
    XLA compiles; the analysis then uses them instead of making them again."""

    from nbcompile.analysis import core

    made: list[str] = []
    original = core.analyse_traced

    def recording(*args, **kwargs):
        try:
            made.append(threading.current_thread().name)
            return original(*args, **kwargs)
        finally:
            done.set()

    done = threading.Event()
    monkeypatch.setattr(core, "analyse_traced", recording)
    fn, args = _slow_enough_program()
    _compile_outlasts(monkeypatch, done)
    c = nbcompile.compile(fn, *args)
    assert made == ["nbcompile-early-hlo"]  # beside XLA's compile, before any analysis
    analysis = c.analysis
    assert made == ["nbcompile-early-hlo"]  # not made again
    assert analysis.counts["jaxpr_eqns"] == len(analysis.walk_order) > 0
    assert analysis.timings["analyse.traced"] < analysis.timings["analyse.kernels"]


def test_the_traced_analysis_made_beside_equals_the_one_made_after(monkeypatch):
    fn, args = _slow_enough_program()
    early = nbcompile.compile(fn, *args)
    early_report = early.report()
    from nbcompile import pipeline

    monkeypatch.setattr(pipeline, "_traced_beside", lambda *a, **k: None)
    fn, args = _slow_enough_program()
    late = nbcompile.compile(fn, *args)
    assert late.stages.early_hlo.beside() is None  # nothing was made beside this compile
    late_report = late.report()
    for key in ("graphs", "folded", "lines"):
        assert late_report[key] == early_report[key], key


def test_a_traced_part_of_another_program_is_not_used():
    from nbcompile.analysis import Artifacts, analyse
    from nbcompile.analysis.core import analyse_traced

    fn, args = _slow_enough_program()
    c = nbcompile.compile(fn, *args)
    other = jax.jit(lambda x: x * 2).trace(1.0).jaxpr
    stray = analyse_traced(other, c.program.source, c.program.name, False, None)
    s = c.stages
    art = Artifacts(
        closed_jaxpr=s.closed_jaxpr,
        lowered=s.lowered,
        compiled=s.compiled,
        hlo_text=s.hlo_text,
        source=c.program.source,
        name=c.program.name,
        calls=s.calls,
        beside_compile=lambda: stray,
    )
    got = analyse(art)
    assert got.counts["jaxpr_eqns"] == c.analysis.counts["jaxpr_eqns"] > 1  # this program's
    assert got.traced_graph.to_json() == c.analysis.traced_graph.to_json()


def test_the_early_thread_runs_at_the_callers_priority(monkeypatch):
    # The conversion holds the GIL: a thread niced below the compiling one, holding it on a busy
    # machine, kept the compile from coming back from XLA for minutes (priority inversion; 10^4
    # calls beside two CPU burners: 91.7 s against 13.1 s). It runs at its caller's priority.
    import os

    fn, args = _slow_enough_program()
    lowered = jax.jit(fn).lower(*args)
    done = threading.Event()
    _compile_outlasts(monkeypatch, done)
    seen: list[int] = []

    def then(text):
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        done.set()

    early = EarlyHlo(lowered, then=then)
    try:
        lowered.compile()
    finally:
        early.compile_done()
    early.beside()
    assert seen == [os.getpriority(os.PRIO_PROCESS, threading.get_native_id())]


def test_the_conversion_is_let_go_of_before_the_heap_is_trimmed(monkeypatch):
    # The conversion's C++ structures are freed into the thread's own heap arena, which XLA's
    # compile threads do not reuse: trimmed (glibc's malloc_trim) once let go of, they are not
    # part of the compile's peak (10^4 calls: 870 -> 749 MB peak, jax.jit 682; benchmarks'
    # "many calls peak RSS" row). Trimming while the XlaComputation is still held frees nothing.
    import sys

    seen: list = []

    def trim():
        seen.append(sys._getframe(1).f_locals.get("computation", "absent"))
        return 0.0

    monkeypatch.setattr(_compat, "release_free_memory", trim)
    fn, args = _slow_enough_program()
    lowered = jax.jit(fn).lower(*args)
    done = threading.Event()
    _compile_outlasts(monkeypatch, done)
    early = EarlyHlo(lowered, then=lambda text: done.set())
    try:
        lowered.compile()
    finally:
        early.compile_done()
    early.beside()
    assert seen == [None]


def test_release_free_memory_answers_in_seconds():
    seconds = _compat.release_free_memory()  # glibc here; a no-op elsewhere
    assert isinstance(seconds, float) and seconds >= 0.0


_HEAP_CHILD = """
import ctypes, ctypes.util, os
from nbcompile import _compat
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
rss = lambda: int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
before = rss()
chunks = [libc.malloc(2048) for _ in range(50_000)]  # 100 MB in small blocks, touched
for p in chunks:
    libc.memset(p, 1, 2048)
pin = libc.malloc(64)  # above them: free() alone cannot give their pages back
for p in chunks:
    libc.free(p)
freed = rss()
_compat.release_free_memory()
print((freed - before) >> 20, (rss() - before) >> 20)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim: Linux")
def test_release_free_memory_gives_freed_heap_pages_back():
    """Blocks freed below a live one stay in the process (glibc keeps them for reuse) until
    trimmed: the trim the early-HLO thread does after letting go of the conversion (measured
    there: peak 870 -> 749 MB at 10^4 calls) gives them back."""
    out = subprocess.run(
        [sys.executable, "-c", _HEAP_CHILD], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    held, left = map(int, out.stdout.split())
    assert held >= 80, (held, left)  # freed but still the process's
    assert left <= held - 60, (held, left)  # handed back
