"""Writes are atomic: a failed freeze leaves no file and never truncates an existing one."""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nbcompile.errors import FreezeError
from nbcompile.frozen import _safetensors, freeze, load

from .conftest import run_python


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


# ---------------------------------------------------------------- write failures: NBC506, short
def _short(err: FreezeError) -> None:
    text = str(err)
    assert err.code == "NBC506" and len(text.splitlines()) <= 3 and "Traceback" not in text, text


def test_missing_folder_and_directory_target(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "m.nbc"
    with pytest.raises(FreezeError) as info:
        freeze(_ok, W, X, path=missing)
    _short(info.value)
    assert str(missing) in str(info.value) and "does not exist" in str(info.value)
    folder = tmp_path / "folder.nbc"
    folder.mkdir()
    with pytest.raises(FreezeError) as info:
        freeze(_ok, W, X, path=folder)
    _short(info.value)
    assert str(folder) in str(info.value) and "directory" in str(info.value)
    assert [p.name for p in tmp_path.iterdir()] == ["folder.nbc"]


class _FullDisk:
    """A file object whose writes fail with ENOSPC once ``room`` bytes are written."""

    def __init__(self, real: Any, room: int) -> None:
        self.real, self.room = real, room

    def write(self, data: Any) -> int:
        self.room -= len(memoryview(data).cast("B"))
        if self.room < 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self.real.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def __enter__(self) -> _FullDisk:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.real.close()


def test_full_disk_is_nbc506_with_the_path(tmp_path: Path, monkeypatch) -> None:
    from nbcompile.frozen import _atomic

    target = tmp_path / "m.nbc"
    freeze(_ok, W, X, path=target, measure_compiled=False)
    before = target.read_bytes()
    real_fdopen = os.fdopen
    monkeypatch.setattr(
        _atomic.os, "fdopen", lambda fd, mode: _FullDisk(real_fdopen(fd, mode), 300)
    )
    with pytest.raises(FreezeError) as info:
        freeze(_ok, W * 3, X, path=target, measure_compiled=False)
    _short(info.value)
    assert str(target) in str(info.value) and "disk is full" in str(info.value)
    assert target.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["m.nbc"]


def test_full_tmpfs_is_nbc506(tmp_path: Path) -> None:
    """The same on a real full file system (a 64 KiB tmpfs), where this machine allows mounts."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip("mounting a tmpfs needs privileges (the monkeypatched test covers ENOSPC)")
    try:
        weights = np.random.default_rng(0).normal(size=(256, 256)).astype(np.float32)  # 256 KB
        with pytest.raises(FreezeError) as info:
            freeze(_ok, weights, np.ones((2, 256), np.float32), path=mount / "m.nbc")
        _short(info.value)
        assert "disk is full" in str(info.value) and list(mount.iterdir()) == []
    finally:
        subprocess.run(["umount", str(mount)], check=False)


_EFBIG = """
import resource, sys, numpy as np
from nbcompile.errors import FreezeError
from nbcompile.frozen import freeze
resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384))
w = np.random.default_rng(0).normal(size=(128, 128)).astype(np.float32)  # 64 KB of weights
try:
    freeze(lambda p, x: x @ p, w, np.ones((2, 128), np.float32), path=sys.argv[1],
           measure_compiled=False)
    print("WROTE")
except FreezeError as err:
    print("CODE", err.code, str(err).replace(chr(10), " | "))
"""


def test_file_size_limit_is_nbc506(tmp_path: Path) -> None:
    target = tmp_path / "m.nbc"
    proc = run_python("-c", _EFBIG, str(target))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "CODE NBC506" in proc.stdout and "file-size limit" in proc.stdout, proc.stdout
    assert str(target) in proc.stdout and list(tmp_path.iterdir()) == []


_KILLED = """
import sys, time, numpy as np
from nbcompile.frozen import _safetensors, freeze
real = _safetensors.chunks
def chunks(tensors):
    it = real(tensors)
    yield next(it)
    print("WRITING", flush=True)
    time.sleep(600)
_safetensors.chunks = chunks
freeze(lambda p, x: x @ p, np.ones((3, 4), np.float32), np.ones((2, 3), np.float32),
       path=sys.argv[1], measure_compiled=False)
"""


def test_a_killed_freeze_leaves_a_temp_file_the_next_freeze_removes(tmp_path: Path) -> None:
    target = tmp_path / "m.nbc"
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(Path(__file__).parents[2]))
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED, str(target)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "WRITING"
    child.send_signal(signal.SIGKILL)
    assert child.wait() == -signal.SIGKILL
    child.stdout.close()
    stale = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    # the name is random (not the PID: PIDs of other namespaces mean nothing here)
    assert len(stale) == 1 and stale[0].name.startswith(".m.nbc.w-"), stale
    assert str(child.pid) not in stale[0].name
    # A temp file whose writer is alive (holds its lock) is never touched.
    live = tmp_path / ".m.nbc.w-abcd1234.tmp"
    live.write_bytes(b"in progress")
    fd = os.open(live, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        freeze(_ok, W, X, path=target, measure_compiled=False)
    finally:
        os.close(fd)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["m.nbc", live.name])
    np.testing.assert_array_equal(np.asarray(load(target)(X)), X @ W)
