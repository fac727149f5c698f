"""The CLI's edges (issue 29, items 7 and 8): odd `.npy` inputs, out-of-range timeouts,
malformed notebooks, outputs on a full disk or a device, freezes that share a folder across
PID namespaces and freezes to device nodes. Every case ends in an NBC code or a clean exit,
never a traceback, and never changes a file it must not."""

from __future__ import annotations

import errno
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nbcompile import cli
from nbcompile.errors import FreezeError
from nbcompile.frozen import _atomic, freeze, load

from .conftest import run_python

ROOT = Path(__file__).resolve().parents[2]
W = np.ones((3, 2), np.float32)
X = np.arange(12, dtype=np.float32).reshape(4, 3)


def _ok(w, x):
    return x @ w


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("edges") / "m.nbc"
    freeze(_ok, W, X, path=path, measure_compiled=False)  # takes float32[b, 3]
    return path


def _main(capsys, *argv: str) -> tuple[int, str]:
    """``nbcompile ARGV`` in this process: (exit status, stderr); argparse exits count too."""
    try:
        code = cli.main(list(argv))
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return code, err


def _header_only(path: Path, shape: tuple[int, ...], descr: str = "<f4", body: bytes = b"") -> Path:
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": descr, "fortran_order": False, "shape": shape}
        )
        f.write(body)
    return path


# ------------------------------------------------------------------------------- .npy inputs
def test_big_endian_input_is_nbc507_naming_the_fix(model: Path, tmp_path: Path, capsys) -> None:
    np.save(tmp_path / "be.npy", X.astype(">f4"))
    code, err = _main(capsys, "run", str(model), "--input", str(tmp_path / "be.npy"))
    assert code == 1 and "[NBC507]" in err and "astype('<f4')" in err, err
    # the Python API says the same (was a raw TypeError from JAX)
    with pytest.raises(FreezeError) as info:
        load(model)(X.astype(">f4"))
    assert info.value.code == "NBC507" and "astype('<f4')" in str(info.value)


def test_a_header_claiming_more_than_the_file_holds_is_nbc520(
    model: Path, tmp_path: Path, capsys
) -> None:
    # 160 bytes whose header claims 10^12 x 3 float32 (the signature's shape, b = 10^12)
    lie = _header_only(tmp_path / "lie.npy", (10**12, 3), body=b"\0" * 32)
    assert lie.stat().st_size <= 160
    code, err = _main(capsys, "run", str(model), "--input", str(lie))
    assert code == 1 and "[NBC520]" in err and "12000000000000 bytes" in err, err
    with pytest.raises(FreezeError) as info:
        cli.read_input(str(lie))
    assert info.value.code == "NBC520"


@pytest.mark.parametrize(
    ("what", "make", "code"),
    [
        ("pickled objects", lambda p: np.save(p, np.array([{}], object)), "NBC507"),
        ("strings", lambda p: np.save(p, np.array(["a", "b"])), "NBC507"),
        ("structured", lambda p: np.save(p, np.zeros(2, "f4,i4")), "NBC507"),
        ("not npy", lambda p: p.write_bytes(b"PK\x03\x04 not an array"), "NBC520"),
        ("empty", lambda p: p.write_bytes(b""), "NBC520"),
        ("truncated", lambda p: p.write_bytes(_npy_bytes(X)[:-5]), "NBC520"),
        ("negative dim", lambda p: _header_only(p, (-4, 3)), "NBC520"),
        (
            "bad header",
            lambda p: p.write_bytes(_npy_bytes(X).replace(b"'descr'", b"'descx'")),
            "NBC520",
        ),
    ],
)
def test_malformed_inputs_get_a_code(tmp_path: Path, what: str, make: Any, code: str) -> None:
    path = tmp_path / "x.npy"
    make(path)
    with pytest.raises(FreezeError) as info:
        cli.read_input(str(path), {"shape": ["b", 3], "dtype": "float32"})
    assert info.value.code == code, (what, str(info.value))


def _npy_bytes(arr: np.ndarray) -> bytes:
    import io

    out = io.BytesIO()
    np.save(out, arr, allow_pickle=False)
    return out.getvalue()


def test_a_fifo_input_is_refused_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "x.npy"
    os.mkfifo(fifo)
    with pytest.raises(FreezeError) as info:  # opening it blocking would wait for a writer
        cli.read_input(str(fifo))
    assert info.value.code == "NBC520" and "regular file" in str(info.value)


_READ_WRONG_SHAPE = """
import json, resource, sys
from nbcompile import cli
from nbcompile.errors import FreezeError
with open("/proc/self/statm") as f:
    vm = int(f.read().split()[0]) * resource.getpagesize()
limit = vm + (512 << 20)  # reading the 2 GB file would need 2 GB more
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
try:
    cli.read_input(sys.argv[1], {"shape": ["b", 3], "dtype": "float32"})
    print(json.dumps({"read": True}))
except FreezeError as err:
    print(json.dumps({"code": err.code, "message": err.message}))
"""


def test_an_input_of_the_wrong_shape_is_refused_before_its_data_is_read(tmp_path: Path) -> None:
    big = _header_only(tmp_path / "big.npy", (2**27, 4))  # 2 GiB of float32, sparse
    with open(big, "r+b") as f:
        f.truncate(f.seek(0, os.SEEK_END) + 2**27 * 4 * 4)
    proc = run_python("-c", _READ_WRONG_SHAPE, str(big))
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["code"] == "NBC507" and "float32[134217728, 4]" in out["message"], out


# ----------------------------------------------------------------------------------- timeouts
@pytest.mark.parametrize("value", ["inf", "1e10", "nan", "-1", "0", "abc", "-inf", "604801"])
@pytest.mark.parametrize("command", ["run", "inspect", "render"])
def test_timeouts_out_of_range_are_usage_errors(
    model: Path, capsys, command: str, value: str
) -> None:
    extra = {"run": ["--input", "x.npy"], "inspect": [], "render": ["-o", "o.html"]}[command]
    target = "n.ipynb" if command == "render" else str(model)
    code, err = _main(capsys, command, target, *extra, f"--timeout={value}")
    assert code == 2 and "[NBC521]" in err and "--timeout" in err, err


def test_max_bytes_must_be_positive(model: Path, capsys) -> None:
    code, err = _main(capsys, "run", str(model), "--input", "x.npy", "--max-bytes=-5")
    assert code == 2 and "[NBC521]" in err, err


def test_the_largest_timeout_arms_the_watchdog(monkeypatch) -> None:
    """A week is accepted and the timer thread starts (1e10 s overflowed in the thread)."""
    parsed = cli.build_parser().parse_args(["run", "m.nbc", "--input", "x", "--timeout", "604800"])
    timer = cli._watchdog(parsed.timeout)
    try:
        assert timer.is_alive()
    finally:
        timer.cancel()


# ------------------------------------------------------------------------ malformed notebooks
def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


_NOTEBOOKS = {
    "not json": "{ this is not json",
    "not utf-8": b"\xff\xfe{",
    "nested 200k deep": '{"nbformat": 4, "cells": ' + _deep(200_000) + "}",
    "nested 100 deep": '{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": '
    + _deep(100)
    + "}",
    "nbformat 99": json.dumps({"nbformat": 99, "nbformat_minor": 0, "metadata": {}, "cells": []}),
    "nbformat string": json.dumps({"nbformat": "4", "metadata": {}, "cells": []}),
    "a list": "[]",
    "cells a string": json.dumps(
        {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": "x"}
    ),
    "source an int": json.dumps(
        {
            "nbformat": 4,
            "nbformat_minor": 5,
            "metadata": {},
            "cells": [{"cell_type": "markdown", "metadata": {}, "source": 5}],
        }
    ),
    "outputs a dict": json.dumps(
        {
            "nbformat": 4,
            "nbformat_minor": 5,
            "metadata": {},
            "cells": [
                {
                    "cell_type": "code",
                    "metadata": {},
                    "source": "1",
                    "outputs": {"a": 1},
                    "execution_count": None,
                }
            ],
        }
    ),
    "metadata a list": json.dumps(
        {"nbformat": 4, "nbformat_minor": 5, "metadata": [], "cells": []}
    ),
}


@pytest.mark.parametrize("name", list(_NOTEBOOKS))
def test_malformed_notebooks_are_nbc522(tmp_path: Path, capsys, name: str) -> None:
    path = tmp_path / "bad.ipynb"
    text = _NOTEBOOKS[name]
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    code, err = _main(capsys, "render", str(path), "-o", str(tmp_path / "o.html"), "--no-execute")
    assert code == 1 and "[NBC522]" in err, err
    assert not (tmp_path / "o.html").exists()


def test_a_notebook_that_is_a_fifo_or_folder_is_nbc522(tmp_path: Path, capsys) -> None:
    os.mkfifo(tmp_path / "pipe.ipynb")
    (tmp_path / "dir.ipynb").mkdir()
    for name in ("pipe.ipynb", "dir.ipynb", "missing.ipynb"):
        code, err = _main(capsys, "render", str(tmp_path / name), "-o", str(tmp_path / "o.html"))
        assert code == 1 and "[NBC522]" in err, err


# ------------------------------------------------------------------------------------ outputs
class _FullDisk:
    """A file object whose writes fail with ENOSPC after ``room`` bytes."""

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


@pytest.mark.parametrize("suffix", [".npy", ".npz"])
def test_output_on_a_full_disk_keeps_the_earlier_file(
    model: Path, tmp_path: Path, capsys, monkeypatch, suffix: str
) -> None:
    np.save(tmp_path / "x.npy", X)
    out = tmp_path / f"out{suffix}"
    out.write_bytes(b"the earlier result")
    real_fdopen = os.fdopen
    monkeypatch.setattr(
        _atomic.os, "fdopen", lambda fd, mode: _FullDisk(real_fdopen(fd, mode), 100)
    )
    code, err = _main(
        capsys, "run", str(model), "--input", str(tmp_path / "x.npy"), "--output", str(out)
    )
    assert code == 1 and "[NBC524]" in err and "disk is full" in err, err
    assert out.read_bytes() == b"the earlier result"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["x.npy", out.name])
    monkeypatch.undo()
    assert (
        _main(capsys, "run", str(model), "--input", str(tmp_path / "x.npy"), "--output", str(out))[
            0
        ]
        == 0
    )
    if suffix == ".npy":
        np.testing.assert_array_equal(np.load(out), X @ W)
    else:
        with np.load(out) as got:  # an NpzFile holds its file open until closed
            np.testing.assert_array_equal(got["out0"], X @ W)


@pytest.fixture
def device(tmp_path: Path) -> Path:
    """A copy of /dev/null made with mknod (needs root), else a FIFO."""
    path = tmp_path / "dev_null_copy"
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except (PermissionError, OSError):
        os.mkfifo(path)
    return path


def test_output_to_a_device_is_refused(model: Path, tmp_path: Path, capsys, device: Path) -> None:
    np.save(tmp_path / "x.npy", X)
    kind = stat.S_IFMT(os.lstat(device).st_mode)
    code, err = _main(
        capsys, "run", str(model), "--input", str(tmp_path / "x.npy"), "--output", str(device)
    )
    assert code == 1 and "[NBC524]" in err and "not a regular file" in err, err
    assert stat.S_IFMT(os.lstat(device).st_mode) == kind


# ------------------------------------------------------------------------ writing: freeze (8)
def test_freeze_to_a_device_node_is_nbc509_and_leaves_it(tmp_path: Path, device: Path) -> None:
    kind = stat.S_IFMT(os.lstat(device).st_mode)
    link = tmp_path / "link.nbc"
    link.symlink_to(device)
    for target in (device, link):
        with pytest.raises(FreezeError) as info:
            freeze(_ok, W, X, path=target, measure_compiled=False)
        assert info.value.code == "NBC509" and "not a regular file" in str(info.value)
    assert stat.S_IFMT(os.lstat(device).st_mode) == kind and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([device.name, "link.nbc"])


_SLOW_FREEZE = """
import os, sys, time, numpy as np
from nbcompile.frozen import _safetensors, freeze, load
real = _safetensors.chunks
def chunks(tensors):
    it = real(tensors)
    yield next(it)
    print("WRITING", os.getpid(), flush=True)
    go = sys.argv[2]
    while not os.path.exists(go):
        time.sleep(0.05)
    yield from it
_safetensors.chunks = chunks
w = np.full((3, 4), 2.0, np.float32)
freeze(lambda p, x: x @ p, w, np.ones((2, 3), np.float32), path=sys.argv[1],
       measure_compiled=False)
print("FROZE", float(np.asarray(load(sys.argv[1])(np.ones((2, 3), np.float32))).sum()), flush=True)
"""


def _in_new_pid_namespace(tmp_path: Path) -> list[str]:
    """argv prefix running a command in a new PID namespace as a high PID (needs root)."""
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip("unshare --pid needs privileges")
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    script = tmp_path / "ns.sh"
    script.write_text(
        textwrap.dedent(f"""\
        echo {pid_max - 50} > /proc/sys/kernel/ns_last_pid 2>/dev/null
        "$@"
        """)
    )
    return ["unshare", "--pid", "--fork", "--mount-proc", "sh", str(script)]


def test_a_freeze_in_another_pid_namespace_keeps_its_temp_file(tmp_path: Path) -> None:
    """Two containers share a volume: B's freeze must not delete A's live temp file."""
    target, go = tmp_path / "m.nbc", tmp_path / "go"
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    child = subprocess.Popen(
        [
            *_in_new_pid_namespace(tmp_path),
            sys.executable,
            "-c",
            _SLOW_FREEZE,
            str(target),
            str(go),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline().split()
        assert line[:1] == ["WRITING"], (line, child.stderr.read() if child.stderr else "")
        temps = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
        assert len(temps) == 1
        freeze(_ok, W, X, path=target, measure_compiled=False)  # this one finishes first
        assert temps[0].exists(), "the other namespace's live temp file was removed"
        go.touch()
        out, err = child.communicate(timeout=300)
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
            child.wait()
    assert child.returncode == 0 and "FROZE 48.0" in out, err[-2000:]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_dead_writers_temp_file_is_removed_a_live_ones_kept(tmp_path: Path) -> None:
    """Stale means unlocked; a live lock in another process keeps it."""
    import fcntl

    target = tmp_path / "m.nbc"
    dead = tmp_path / ".m.nbc.w-dead1234.tmp"
    dead.write_bytes(b"partial")
    live = tmp_path / ".m.nbc.w-live1234.tmp"
    live.write_bytes(b"in progress")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            "fd = os.open(sys.argv[1], os.O_RDWR)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('LOCKED', flush=True)\n"
            "time.sleep(120)\n",
            str(live),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "LOCKED"
        old_form = tmp_path / ".m.nbc.99999999.abcd.tmp"
        old_form.write_bytes(b"older version")
        os.utime(old_form, (1, 1))
        removed = _atomic.remove_stale_temps(target)
        assert sorted(p.name for p in removed) == sorted([dead.name, old_form.name])
        assert live.exists()
        fd = os.open(live, os.O_RDWR)  # really still locked by the holder
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
