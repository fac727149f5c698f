"""Writes are atomic: a failed freeze leaves no file and never truncates an existing one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nbcompile.errors import FreezeError
from nbcompile.frozen import _safetensors, freeze, load


def _ok(params, x):
    return x @ params


def _broken(params, x):
    raise RuntimeError("model bug")


W = np.arange(12, dtype=np.float32).reshape(3, 4)
X = np.ones((2, 3), np.float32)


def test_failed_freeze_leaves_no_file(tmp_path: Path) -> None:
    target = tmp_path / "m.nbc"
    with pytest.raises(FreezeError) as info:
        freeze(_broken, W, X, path=target)
    assert info.value.code == "NBC506" and "model bug" in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_failed_freeze_keeps_the_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "m.nbc"
    freeze(_ok, W, X, path=target, measure_compiled=False)
    before = target.read_bytes()
    with pytest.raises(FreezeError):
        freeze(_broken, W, X, path=target)
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["m.nbc"]


def test_failure_while_writing_keeps_the_existing_file(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "m.nbc"
    freeze(_ok, W, X, path=target, measure_compiled=False)
    before = target.read_bytes()

    def chunks_then_fail(tensors):
        yield b"x" * 1000  # part of the section reaches the temp file before the failure
        raise OSError("disk full")

    monkeypatch.setattr(_safetensors, "chunks", chunks_then_fail)
    with pytest.raises(FreezeError, match="disk full") as info:
        freeze(_ok, W * 2, X, path=target, measure_compiled=False)
    assert info.value.code == "NBC506" and str(target) in str(info.value)
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["m.nbc"]
    monkeypatch.undo()
    with pytest.raises(FreezeError, match="disk full"):
        monkeypatch.setattr(_safetensors, "chunks", chunks_then_fail)
        freeze(_ok, W, X, path=tmp_path / "new.nbc", measure_compiled=False)
    assert [p.name for p in tmp_path.iterdir()] == ["m.nbc"]
    np.testing.assert_array_equal(np.asarray(load(target)(X)), X @ W)


def test_invalid_requests_are_refused(tmp_path: Path) -> None:
    with pytest.raises(FreezeError, match="platforms"):
        freeze(_ok, W, X, path=tmp_path / "a.nbc", platforms=("metal",))
    with pytest.raises(FreezeError, match="weights_argnums"):
        freeze(_ok, W, X, path=tmp_path / "a.nbc", weights_argnums=5)
    with pytest.raises(FreezeError, match=r"namedtuple|arrays in"):
        freeze(lambda p, x: (x, "text"), W, X, path=tmp_path / "a.nbc")
    assert list(tmp_path.iterdir()) == []
