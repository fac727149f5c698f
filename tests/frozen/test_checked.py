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


def test_a_program_from_elsewhere_is_lowered_in_a_child_before_each_new_shape(
    tmp_path: Path, monkeypatch, forks
) -> None:
    """JAX's lowering and shape refinement run in a child first (the fuzz found a program that
    crashes the refinement); each shape once, recorded for later processes."""
    import jax

    path = tmp_path / "m.nbc"
    freeze(lambda p, x: x @ p * 2, W, X, path=path, measure_compiled=False)
    monkeypatch.setenv("NBCOMPILE_CHECKED_DIR", str(tmp_path / "elsewhere"))
    model = load(path)
    assert forks == [1]  # the probe
    np.testing.assert_array_equal(np.asarray(model(X)), X @ W * 2)
    assert forks == [1, 1]  # lowered and refined at b=2 in a child first
    model(X)
    assert len(forks) == 2
    X5 = np.ones((5, 3), np.float32)
    np.testing.assert_array_equal(np.asarray(model(X5)), X5 @ W * 2)
    assert len(forks) == 3  # a new batch size is a new refinement
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda x: model(x) + 1)(X5)), X5 @ W * 2 + 1)
    assert len(forks) == 3  # the same shapes inside the caller's jit: already checked
    X7 = np.ones((7, 3), np.float32)
    jax.jit(model)(X7)
    assert len(forks) == 4  # inside the caller's jit, at a new shape: checked too
    shapes = list((tmp_path / "elsewhere").rglob("*.shapes"))
    assert len(shapes) == 3
    again = load(path)  # a later load (or process) reuses the probe and shape records
    again(X5)
    assert len(forks) == 4


def test_a_crash_in_the_first_call_child_refuses_the_file(
    tmp_path: Path, monkeypatch, forks
) -> None:
    import signal

    from nbcompile.errors import FreezeError
    from nbcompile.frozen import _program

    path = tmp_path / "m.nbc"
    freeze(lambda p, x: x @ p * 3, W, X, path=path, measure_compiled=False)
    monkeypatch.setenv("NBCOMPILE_CHECKED_DIR", str(tmp_path / "elsewhere"))
    model = load(path)
    monkeypatch.setattr(_program, "first_call", lambda *a: os.kill(os.getpid(), signal.SIGSEGV))
    with pytest.raises(FreezeError) as info:
        model(X)
    assert info.value.code == "NBC500"
    assert "crashed JAX's lowering and shape refinement at inputs float32[2, 3]" in str(info.value)
    assert "signal 11" in str(info.value)
    monkeypatch.setattr(
        _program, "first_call", lambda *a: {"error": "ValueError: Error refining shapes."}
    )
    with pytest.raises(FreezeError) as info:
        model(X)
    assert info.value.code == "NBC500" and "Error refining shapes" in str(info.value)
    assert not list((tmp_path / "elsewhere").rglob("*.shapes"))  # nothing recorded as checked
