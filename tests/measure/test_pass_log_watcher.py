"""The pass log read while XLA compiles (``PassLogWatcher``): a step file is read once the next
one exists, and what it read is the log a reading after the compile gives, step for step and
diff for diff."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from nbcompile._compat import persistent_cache_disabled, xla_dump_options
from nbcompile.analysis.passes_log import PassLogWatcher, read_pass_log, step_files


def _mlp(ws, x):
    for w in ws:
        x = jnp.tanh(x @ w) * 0.5 + 0.25
    return jnp.mean(x**2)


@pytest.fixture(scope="module")
def dump():
    """A real XLA:CPU dump of a small train step's compile (passes dumped)."""
    folder = Path(tempfile.mkdtemp(prefix="nbc-watch-"))
    ws = [jnp.ones((32, 32)) * 0.01 for _ in range(3)]
    lowered = jax.jit(jax.grad(_mlp)).lower(ws, jnp.ones((8, 32)))
    with persistent_cache_disabled():  # a cache hit would run no XLA and dump nothing
        lowered.compile(compiler_options={"xla_dump_to": str(folder), **xla_dump_options("cpu")})
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _same(a, b):
    assert a.module == b.module and a.steps == b.steps
    for step in a.steps:
        assert a.hlo(step.index) == b.hlo(step.index)
        assert a.diff(step.index) == b.diff(step.index)


def _wait(condition, seconds=30.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the watcher read nothing in 30 s"
        time.sleep(0.01)


def test_steps_written_one_by_one_are_read_as_they_close_and_match_a_later_reading(dump, tmp_path):
    module, files = step_files(dump)
    assert len(files) > 4
    # XLA writes the module before its passes, then a file per step: replayed by hand here
    for path in dump.glob(f"module_*.{module}.before_optimizations.txt"):
        shutil.copy(path, tmp_path / path.name)
    watcher = PassLogWatcher(tmp_path)
    half = len(files) // 2
    for _, _, _, path in files[:half]:
        shutil.copy(path, tmp_path / path.name)
    # the last file written may still be open: only the ones before it are read
    _wait(lambda: watcher.reader is not None and len(watcher.reader.steps) == half - 1)
    time.sleep(3 * PassLogWatcher.POLL)
    assert len(watcher.reader.steps) == half - 1
    made_early = set(watcher.reader.diffs)
    assert made_early == {s.index for s in watcher.reader.steps if s.changed}
    for _, _, _, path in files[half:]:
        shutil.copy(path, tmp_path / path.name)
    watcher.stop()
    read_early = len(watcher.reader.steps)
    assert half - 1 <= read_early < len(files)
    log = read_pass_log(tmp_path, watcher)
    assert len(log.steps) == len(files)
    _same(log, read_pass_log(dump))


def test_a_watcher_of_another_folder_or_module_is_not_taken(dump, tmp_path):
    other = PassLogWatcher(tmp_path)
    other.stop()
    assert other.reader is None  # nothing there
    _same(read_pass_log(dump, other), read_pass_log(dump))
    watcher = PassLogWatcher(dump)
    _wait(lambda: watcher.reader is not None and watcher.reader.steps)
    watcher.stop()
    watcher.reader.module = "another_module"  # what it read is not this module's
    _same(read_pass_log(dump, watcher), read_pass_log(dump))


def test_compile_with_passes_watches_its_own_dump_and_stops_with_the_compile(monkeypatch):
    import nbcompile
    import nbcompile.pipeline as pipeline

    made = []

    class Recording(PassLogWatcher):
        def __init__(self, folder):
            super().__init__(folder)
            made.append(self)

    monkeypatch.setattr(pipeline, "PassLogWatcher", Recording)
    ws = [jnp.ones((32, 33)) * 0.01, jnp.ones((33, 32)) * 0.01]  # a program no test compiled
    c = nbcompile.compile(jax.grad(_mlp), ws, jnp.ones((8, 32)), passes=True)
    (watcher,) = made
    assert not watcher._thread.is_alive()  # stopped when the compile returned
    assert c.passes is not None and len(c.passes.steps) > 4
