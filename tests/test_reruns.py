"""Re-running cells the way people do: what a run shows belongs to that run only.

Issue-14 §6 regressions: notes of earlier options lingering on a cache hit, ``--bench`` timing
JAX's cache lookup as "compile time", nbcompile's own calls reported as user recompiles, and a
"what changed" card listing every ``def`` line as removed when a function defined in one cell
is compiled from another.
"""

from __future__ import annotations

import pytest

from .helpers import PREDICT, run, setup


@pytest.fixture
def ip(shell):
    return setup(shell)


def test_a_cache_hit_shows_only_this_runs_options(ip, tmp_path):
    import nbcompile

    path = tmp_path / "m.nbc"
    assert run(ip, PREDICT.format(opts=f" -q --freeze {path}", end="")).success
    assert "freeze" in nbcompile.last().extras
    assert run(ip, PREDICT.format(opts=" -q --debug", end="")).success
    c = nbcompile.last()
    assert c.cache_hit
    assert "freeze" not in c.extras and "debug" in c.extras
    assert not any("frozen" in n or str(path) in n for n in c.notes)
    assert run(ip, PREDICT.format(opts=" -q", end="")).success
    c = nbcompile.last()
    assert c.cache_hit and "debug" not in c.extras and c.debug is None


def test_bench_of_an_already_compiled_function_measures_a_real_compile(ip):
    import nbcompile

    assert run(ip, PREDICT.format(opts=" -q -f", end="")).success  # predict is now a jit object
    res = run(ip, "%%compile -q --bench\npredict(params, x)\n")
    assert res.success, res.error_in_exec
    first = nbcompile.last()
    # JAX had this program in its caches (a lookup takes microseconds): the figure must come
    # from a real XLA compile (the stage's own, or one more when JAX's persistent cache, which
    # the suite fills, served the stage)
    assert first.stages.xla_compiles == 1 or "compile_measured" in first.timings
    assert first.bench.compile_seconds > 0.005, first.bench.compile_seconds
    res = run(ip, "%%compile -q --bench\npredict(params, x)\n")  # a cache hit: nothing compiled
    again = nbcompile.last()
    assert again.cache_hit and "compile_measured" in again.timings
    assert again.bench.compile_seconds > 0.005, again.bench.compile_seconds


def test_freeze_from_a_normal_cell_is_not_reported_as_a_user_recompile(ip, tmp_path, capsys):
    assert run(ip, PREDICT.format(opts=" -q -f", end="")).success
    capsys.readouterr()
    res = run(
        ip,
        f"import nbcompile\n_ = nbcompile.freeze(predict, params, x, "
        f"path={str(tmp_path / 'p.nbc')!r})\n",
    )
    assert res.success, res.error_in_exec
    assert "compiled again" not in capsys.readouterr().err


def test_compiling_from_another_cell_is_not_an_edit_of_the_defining_cell(ip):
    import nbcompile

    assert run(ip, PREDICT.format(opts=" -q -f", end="")).success
    assert run(ip, "x = jnp.ones((5, 3), jnp.float32)").success
    assert run(ip, "%%compile -q\npredict(params, x)\n").success
    changes = "\n".join(nbcompile.last().changes)
    assert "removed" not in changes, changes
    assert "compiled from a different cell" in changes
    assert "argument x: f32[2,3] → f32[5,3]" in changes


def test_diff_of_two_profiled_runs_has_time_deltas_per_kernel_and_line(ip):
    import nbcompile

    assert run(ip, PREDICT.format(opts=" -q -f --profile 5", end="")).success
    before = nbcompile.last()
    changed = PREDICT.replace("return h * 2.0 + 1.0", "return jnp.tanh(h @ h.T) * 2.0 + 1.0")
    assert run(ip, changed.format(opts=" -q --profile 5", end="")).success
    after = nbcompile.last()
    d = after.diff(before)
    assert d.changed and d.fusions_added  # the program diff reads through
    assert d.time is not None
    data = d.to_json()
    assert data["time"] and data["program"]["fusions"]["added"]
    assert "vs" in d.text()
    plain = after.diff(nbcompile.compile(lambda x: x, ip.user_ns["x"]))
    assert plain.time is None  # only when both sides were profiled


def test_what_changed_card_links_to_the_visual_diff(ip):
    import gc
    import weakref

    import nbcompile

    assert run(ip, PREDICT.format(opts=" -q -f", end="")).success
    first = nbcompile.last()
    changed = PREDICT.replace("return h * 2.0 + 1.0", "return jnp.tanh(h @ h.T) * 2.0 + 1.0")
    assert run(ip, changed.format(opts=" -q", end="")).success
    second = nbcompile.last()
    card = second.report()["extras"]["changes"]
    assert card["diff"] is not None and card["diff"]["schema"].startswith("nbcompile.diff")
    # the link is weak: earlier runs are not kept alive by later ones
    probe = weakref.ref(first)
    del first
    ip.run_cell("_ = __ = ___ = None")
    gc.collect()
    assert probe() is None or probe() is not second


def test_compare_shows_the_diff_view_of_two_targets(ip):
    import nbcompile

    x = ip.user_ns["x"]
    f = ip.user_ns["jnp"].tanh
    cpu = nbcompile.compile(lambda v: f(v) * 2.0, x)
    tpu = nbcompile.compile(lambda v: f(v) * 2.0, x, backend="tpu", topology="v5e:2x2")
    result = nbcompile.compare(cpu, tpu)
    assert "kernel" in result.text()
    assert "text/html" in result._repr_mimebundle_()
