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


def test_an_unchanged_cell_run_again_and_again_reports_no_change(ip):
    # A re-run is traced first without recording the user's calls, so its program names its
    # operations otherwise and its location digest differs; found through the recorded
    # program's alias, it is the same program in the same places. The "what changed" card
    # called it "the same program, its code in other places" twice (with a 1.3 s visual diff
    # at GPT-2 size) when the probe's exact digest was new: seen in the benchmark's re-run
    # cells, run as here (the model from a file, a jax.jit trace of it between the runs) in
    # a plain InteractiveShell. This shell does not meet a new exact digest, so the mechanism
    # is pinned by the test below; this one keeps the property end to end.
    import nbcompile

    assert run(ip, "from benchmarks._extra_models import build\nmodel_fn, example = build('MLP')")
    names = ", ".join(("params", "x", "y", "z")[: len(ip.user_ns["example"])])
    assert run(ip, f"{names}, = example\nimport jax").success
    # a name no other test compiles: the session's history of runs outlives a test
    cell = (
        f"%%compile -q\ndef step_again_unchanged({names}):\n    return model_fn({names})\n"
        f"step_again_unchanged({names})\n"
    )
    anchor = f"_t = jax.jit(lambda {names}: model_fn({names})).trace({names})\n"
    for k in range(6):
        assert run(ip, cell).success
        c = nbcompile.last()
        assert k == 0 or c.cache_hit
        assert k == 0 or c.changes == (), (k, c.changes)
        assert run(ip, anchor).success
        assert k == 0 or "changes" not in c.report()["extras"], k


def test_a_probe_found_through_its_alias_has_the_recorded_programs_key():
    # The cache's side of the case above: a probe (traced without the call recording) whose
    # exact digest is new but whose identity was aliased to the recorded program's is that
    # program, and its key says so (the history compares keys). Before the fix its key kept the
    # probe's own location digest, so the history saw "its code in other places".
    from nbcompile.cache import CompilationCache
    from nbcompile.stages.key import ProgramKey

    def key(exact, locations):
        return ProgramKey(exact, True, "", program="p", locations=locations, executable="e")

    cache = CompilationCache()
    recorded, probe = key("exact-recorded", "named"), key("exact-probe-1", "unnamed")
    cache.put(recorded, "the program")
    cache.alias(probe, recorded)
    again = key("exact-probe-2", "unnamed")  # the same probe program, other exact bytes
    assert cache.get(again) == "the program"
    assert again.identity == recorded.identity
    by_exact = key("exact-probe-1", "unnamed")
    assert cache.get(by_exact) == "the program" and by_exact.identity == recorded.identity
