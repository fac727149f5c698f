"""The cyclic collector is paused while a ``%%compile`` cell traces, lowers and looks its program
up (nbcompile/_gc.py: a re-run's trace is freed before it resumes, so the trace sets off no full
collection of the heap), never while the user's own code in the cell runs, and is back on after
the cell, also when the trace fails."""

from __future__ import annotations

import gc

import nbcompile
from nbcompile.report import forget_memos, html


def test_the_collector_is_paused_while_tracing_and_back_after(shell):
    shell.reset(new_session=False)
    assert gc.isenabled()
    setup = (
        "import gc, jax.numpy as jnp\n"
        "seen = []\n"
        "def traced_gc(x):\n"
        "    seen.append(gc.isenabled())  # runs while JAX traces\n"
        "    return jnp.sin(x) * 2.0\n"
        "x = jnp.ones((4,), jnp.float32)\n"
    )
    assert shell.run_cell(setup).success
    cell = "%%compile -q\nbody_gc = gc.isenabled()\ntraced_gc(x)\n"
    for _ in range(2):  # the first compile, then a re-run (a cache hit)
        assert shell.run_cell(cell).success
        assert shell.user_ns["body_gc"] is True  # the user's own code: collector as it was
        assert gc.isenabled()
    assert nbcompile.last().cache_hit
    assert shell.user_ns["seen"] and not any(shell.user_ns["seen"])


def test_the_collector_is_back_on_after_a_failed_trace(shell):
    shell.reset(new_session=False)
    setup = (
        "import jax.numpy as jnp\n"
        "def broken_gc(x):\n"
        "    return jnp.sin(x) @ jnp.ones((3, 3))  # shapes do not match\n"
        "x = jnp.ones((4,), jnp.float32)\n"
    )
    assert shell.run_cell(setup).success
    result = shell.run_cell("%%compile -q\nbroken_gc(x)\n")
    assert not result.success
    assert gc.isenabled()


def test_a_programs_next_report_compresses_only_its_own_entries():
    """The compressor's state after a report's large entries is kept: a report with the same
    large entries and other small ones packs from it, to the bytes a fresh pack gives."""
    forget_memos()
    graph = {"nodes": [{"id": f"n{i}", "op": f"tanh_{i * 7919}"} for i in range(800)]}
    lines = {str(i): {"fusions": [f"fusion.{i}"], "ops": i} for i in range(100)}

    def report(seconds: float, graph: dict = graph) -> dict:
        return {
            "schema": "nbcompile.report/1",
            "graphs": {"traced": graph},
            "lines": lines,
            "timings": {"trace": seconds},
        }

    first = html.pack_report(report(0.5))
    ((prefix, kept),) = html._PREFIXES.items()
    assert '"graphs"' in prefix and '"timings"' not in prefix  # large entries only
    second = html.pack_report(report(0.75))
    assert next(iter(html._PREFIXES.values())) is kept and len(html._PREFIXES) == 1  # reused
    assert html.unpack_report(second)["timings"] == {"trace": 0.75}
    assert html.unpack_report(second) == report(0.75)
    assert first["data"] != second["data"]
    forget_memos()
    assert html.pack_report(report(0.75))["data"] == second["data"]  # as a fresh pack
    # other large entries: another prefix, never the kept state
    other = {"nodes": [{"id": f"n{i}", "op": f"exp_{i * 7919}"} for i in range(800)]}
    third = html.pack_report(report(0.75, other))
    assert html.unpack_report(third) == report(0.75, other)
    assert len(html._PREFIXES) == 2
