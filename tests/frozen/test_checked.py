"""A program checked once (by freeze or by a load) is not probed again; anything else is."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from nbcompile.frozen import _checked, _sandbox, freeze, load

W = np.arange(12, dtype=np.float32).reshape(3, 4)
X = np.ones((2, 3), np.float32)


@pytest.fixture
def forks(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = _sandbox.run_isolated

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(_sandbox, "run_isolated", counting)
    return calls


def test_freeze_records_its_program_and_load_skips_the_probe(tmp_path: Path, forks) -> None:
    path = tmp_path / "m.nbc"
    freeze(lambda p, x: x @ p, W, X, path=path, measure_compiled=False)
    np.testing.assert_array_equal(np.asarray(load(path)(X)), X @ W)
    assert forks == []


def test_an_unknown_program_is_probed_once_then_recorded(
    tmp_path: Path, monkeypatch, forks
) -> None:
    path = tmp_path / "m.nbc"
    freeze(lambda p, x: x @ p + 1, W, X, path=path, measure_compiled=False)
    monkeypatch.setenv("NBCOMPILE_CHECKED_DIR", str(tmp_path / "elsewhere"))  # another machine
    load(path)
    load(path)
    assert forks == [1]
    assert list((tmp_path / "elsewhere").rglob("*.json"))


def test_records_can_be_turned_off(tmp_path: Path, monkeypatch, forks) -> None:
    monkeypatch.setenv("NBCOMPILE_CHECKED_DIR", "off")
    path = tmp_path / "m.nbc"
    freeze(lambda p, x: x @ p - 1, W, X, path=path, measure_compiled=False)
    load(path)
    load(path)
    assert forks == [1, 1]


def test_the_record_folder_depends_on_versions_and_limits(monkeypatch) -> None:
    from nbcompile.frozen import _program

    before = _checked._scope()
    monkeypatch.setattr(_program, "MAX_CHAIN", _program.MAX_CHAIN + 1)
    assert _checked._scope() != before
    assert os.environ["NBCOMPILE_CHECKED_DIR"]  # the tests never write the user's cache


def test_no_gradient_program_runs_under_the_callers_grad(tmp_path: Path) -> None:
    """jit(grad(...)) with the caller's own debug callback: the frozen model refuses to be
    differentiated before anything runs, so no callback sees data chosen by the file."""
    import jax

    from nbcompile.errors import FreezeError

    path = tmp_path / "m.nbc"
    freeze(lambda p, x: x @ p, W, X, path=path, measure_compiled=False)
    model = load(path)
    seen: list[object] = []

    def loss(x):
        jax.debug.callback(lambda v: seen.append(v), x)
        return model(x).sum()

    with pytest.raises(FreezeError) as info:
        jax.jit(jax.grad(loss))(X)  # refused while tracing: nothing runs at all
    assert info.value.code == "NBC507" and "differentiated" in str(info.value)
    assert seen == []
    with pytest.raises(FreezeError):
        jax.grad(loss)(X)  # eager: the callback sees only the caller's own input
    assert all(np.array_equal(np.asarray(v), X) for v in seen)
