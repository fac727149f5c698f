"""The checked-programs record and nbcompile's cache folders are input like any file.

- A record shipped beside a file (a relative ``$XDG_CACHE_HOME``) is never read, and no record
  makes a model ``written_here`` or skips the custom-call check (issue 29, item 2).
- JAX's persistent compilation cache is never put in the current folder (``XDG_CACHE_HOME=""``
  or relative), nor in a folder others can write (item 3).
- A damaged record (FIFO, a link to ``/dev/zero``, a sparse 3 GB file, a folder, JSON of
  another schema) is ignored and written again, in bounded time and memory (item 5).

Hostile cases run in supervised child processes (`_supervise`, `_record_worker.py`).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from nbcompile import _dirs
from nbcompile.frozen import _checked, _format

from ..helpers import freeze_small_matmul
from . import _supervise

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data"
MEMORY_LIMIT = 3 * 2**30
NBCOMPILE = Path(sys.executable).parent / "nbcompile"


def _python(code: str, *, cwd: Path, env: dict[str, str], timeout: float = 120):
    """``python -c code`` in a fresh process (CPU, the repository importable)."""
    full = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3", **env)
    full["PYTHONPATH"] = os.pathsep.join([str(HERE.parents[1]), str(HERE)])
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=full,
        timeout=timeout,
        check=False,
    )


def _probe_result(path: Path, tmp: Path) -> dict:
    """What the probe says about a file's program (in a child: the file may be hostile)."""
    code = (
        "import json, sys\n"
        "from nbcompile.frozen import _format, _program\n"
        "s = _format.check_sections(open(sys.argv[1], 'rb').read())\n"
        "print(json.dumps(_program.probe(s.program)))\n"
    )
    proc = _python(code.replace("sys.argv[1]", repr(str(path))), cwd=tmp, env={})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _digest(path: Path) -> str:
    return _format.check_sections(path.read_bytes()).program_sha256.hex()


# ---------------------------------------------------------------- item 2: shipped records
def test_a_record_shipped_beside_the_file_is_never_read(tmp_path: Path) -> None:
    """The issue's attack: an archive holds ``fuzz_seed1_55099.nbc`` (it crashes JAX's shape
    refinement) and ``.cache/nbcompile/checked/<scope>/<digest>.json`` saying its program was
    checked and written here, with ``XDG_CACHE_HOME=.cache``. ``nbcompile run`` must still
    refuse it (NBC500), never die."""
    xdg = ".cache"
    download = tmp_path / "download"
    download.mkdir()
    model = download / "model.nbc"
    model.write_bytes((DATA / "fuzz_seed1_55099.nbc").read_bytes())
    probe = _probe_result(model, tmp_path)
    record = {**probe, "written_here": True}
    base = download / xdg / "nbcompile" / "checked"
    records = base / _checked._scope()
    records.mkdir(parents=True)
    os.chmod(records, 0o700)
    (records / f"{_digest(model)}.json").write_text(json.dumps(record))
    code = (
        "import numpy as np\n"
        "from nbcompile.frozen import _load, _format\n"
        "c = _load.check_file(_format.read_file('model.nbc', None))\n"
        "for i, leaf in enumerate(c.manifest['inputs']['leaves']):\n"
        "    shape = [2 if d == 'b' else d for d in leaf['shape']]\n"
        "    np.save(f'x{i}.npy', np.zeros(shape, leaf['dtype']))\n"
        "print(len(c.manifest['inputs']['leaves']))\n"
    )
    made = _python(code, cwd=download, env={"NBCOMPILE_CHECKED_DIR": "off"})
    assert made.returncode == 0, made.stderr[-2000:]
    inputs = [a for i in range(int(made.stdout.split()[-1])) for a in ("--input", f"x{i}.npy")]
    env = dict(os.environ, JAX_PLATFORMS="cpu", XDG_CACHE_HOME=xdg, HOME=str(tmp_path / "home"))
    env.pop("NBCOMPILE_CHECKED_DIR", None)
    proc = subprocess.run(
        [str(NBCOMPILE), "run", "model.nbc", *inputs, "--output", "y.npy"],
        capture_output=True,
        text=True,
        cwd=download,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 1, f"exit {proc.returncode}: {proc.stderr[-1000:]}"
    assert "NBC500" in proc.stderr and "shape refinement" in proc.stderr, proc.stderr
    # the records went to the user's own folder, not the download's
    assert list((tmp_path / "home" / ".cache" / "nbcompile" / "checked").rglob("*.json"))


def test_the_custom_call_check_runs_even_with_a_genuine_record(tmp_path: Path) -> None:
    """A LAPACK call whose declared results lie (512x512 operand, 1x1 results) with a record
    signed by this user's own key, as if its program had been checked: the custom-call check
    still runs on every load (a record only saves the child) and refuses it (NBC505)."""
    from . import _craft, _hostile

    text, inputs, outputs = _hostile._lying_calls()["getrf_512x512_declares_1x1"]
    path = tmp_path / "lie.nbc"
    path.write_bytes(_craft.program_file(text, inputs, outputs))
    probe = _probe_result(path, tmp_path)
    assert "refuse" not in probe and probe["custom_calls"], probe  # the probe finds no fault
    code = (
        "import json, numpy as np\n"
        "from nbcompile.errors import FreezeError\n"
        "from nbcompile.frozen import _checked, load\n"
        f"digest = bytes.fromhex({_digest(path)!r})\n"
        f"_checked.remember(digest, json.loads({json.dumps(json.dumps(probe))}))\n"
        "assert _checked.recall(digest) is not None  # genuine: this user's key, this file\n"
        "try:\n"
        f"    m = load({str(path)!r})\n"
        "    m(np.zeros((512, 512), np.float32))\n"
        "    print('RAN')\n"
        "except FreezeError as err:\n"
        "    print(err.code, err)\n"
    )
    proc = _python(code, cwd=tmp_path, env={"NBCOMPILE_CHECKED_DIR": str(tmp_path / "records")})
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-1000:]}"
    assert proc.stdout.startswith("NBC505"), proc.stdout


def test_only_this_processs_freeze_makes_a_program_written_here(tmp_path: Path) -> None:
    """``written_here`` skips the first-call child, so no record can say it: a later process
    loading the user's own file checks its first call at each shape (once, recorded)."""
    path = tmp_path / "m.nbc"
    records = tmp_path / "records"
    code = (
        "import numpy as np, sys\n"
        "from nbcompile.frozen import freeze, load\n"
        "if sys.argv[1:] == ['freeze']:\n"
        "    freeze(lambda p, x: x @ p, np.ones((3, 4), np.float32),\n"
        f"           np.ones((2, 3), np.float32), path={str(path)!r}, measure_compiled=False)\n"
        f"print(load({str(path)!r}).metadata['written_here'])\n"
    )
    env = {"NBCOMPILE_CHECKED_DIR": str(records)}
    frozen = _python(code.replace("sys.argv[1:]", "['freeze']"), cwd=tmp_path, env=env)
    later = _python(code, cwd=tmp_path, env=env)
    assert frozen.stdout.split() == ["True"], frozen.stderr[-2000:]
    assert later.stdout.split() == ["False"], later.stderr[-2000:]


# ---------------------------------------------------------------- item 3: cache folders
@pytest.mark.parametrize("xdg", ["", ".cache", "nbcompile"])
def test_jax_cache_is_never_in_the_current_folder(tmp_path: Path, xdg: str) -> None:
    """``%load_ext nbcompile`` switches on JAX's persistent cache: with an empty or relative
    ``XDG_CACHE_HOME`` it goes to ``~/.cache/nbcompile/jax``, never under the notebook's
    folder (it holds native code that later processes run)."""
    notebook = tmp_path / "notebook"
    notebook.mkdir()
    home = tmp_path / "home"
    code = (
        "import jax\n"
        "from nbcompile.cache import enable_persistent_cache\n"
        "print(enable_persistent_cache())\n"
        "print(jax.config.jax_compilation_cache_dir)\n"
    )
    env = {"XDG_CACHE_HOME": xdg, "HOME": str(home), "NBCOMPILE_CACHE_DIR": ""}
    proc = _python(code, cwd=notebook, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    want = str(home / ".cache" / "nbcompile" / "jax")
    assert proc.stdout.split() == [want, want], proc.stdout
    assert list(notebook.iterdir()) == []
    assert stat.S_IMODE(os.stat(want).st_mode) == 0o700


def test_jax_cache_in_a_folder_others_can_write_is_not_switched_on(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    code = (
        "import jax\n"
        "from nbcompile.cache import enable_persistent_cache\n"
        "print(enable_persistent_cache(), jax.config.jax_compilation_cache_dir)\n"
    )
    for env in ({"NBCOMPILE_CACHE_DIR": str(shared / "jax")}, {"NBCOMPILE_CACHE_DIR": "rel"}):
        proc = _python(code, cwd=tmp_path, env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.split() == ["None", "None"], proc.stdout
        assert proc.stderr.count("nbcompile:") == 1, proc.stderr  # one line says why
    assert not (shared / "jax").exists()
    assert not (tmp_path / "rel").exists()


def test_private_folder_rules(tmp_path: Path, capsys) -> None:
    """Made 0700; refused if a symlink, writable by others, owned by another user, under a
    folder others can write (unless sticky), or relative."""
    made = _dirs.private_folder(tmp_path / "a" / "b", "test cache")
    assert made == tmp_path / "a" / "b"
    assert stat.S_IMODE(os.stat(tmp_path / "a").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(made).st_mode) == 0o700
    link = tmp_path / "link"
    link.symlink_to(made)
    assert _dirs.private_folder(link, "test cache") is None
    os.chmod(made, 0o770)
    assert _dirs.private_folder(made, "test cache") is None
    os.chmod(made, 0o700)
    os.chmod(tmp_path / "a", 0o777)
    assert _dirs.private_folder(made, "test cache") is None
    os.chmod(tmp_path / "a", 0o1777)  # sticky, like /tmp
    assert _dirs.private_folder(made, "test cache") == made
    os.chmod(tmp_path / "a", 0o700)
    assert _dirs.private_folder(Path("relative/folder"), "test cache") is None
    if os.getuid() == 0:
        os.chown(made, 12345, 12345)
        assert _dirs.private_folder(made, "test cache") is None
        os.chown(made, 0, 0)
    err = capsys.readouterr().err
    assert "is a symlink" in err and "can be written by other users" in err
    assert "not an absolute path" in err


def test_relative_or_empty_xdg_cache_home_is_ignored(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for value in ("", ".cache", "x/y"):
        monkeypatch.setenv("XDG_CACHE_HOME", value)
        assert _dirs.cache_home() == tmp_path / ".cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _dirs.cache_home() == tmp_path / "xdg"


# ---------------------------------------------------------------- item 5: damaged records
@pytest.fixture(scope="module")
def small_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("records") / "small.nbc"
    return freeze_small_matmul(path)


PLANTED = [
    "fifo",
    "dev_zero",
    "sparse",
    "folder",
    "missing_keys",
    "wrong_types",
    "old_format_written_here",
]


def test_damaged_records_are_ignored_and_written_again(small_file: Path, tmp_path: Path) -> None:
    """A FIFO (the load hung), a link to /dev/zero and a sparse 3 GB file (memory ran out),
    a record of another schema (raw KeyError / ValueError), an old record claiming
    ``written_here`` (honoured): each is ignored, the probe runs, the file loads, and a
    genuine record replaces it (a folder in its place cannot be replaced; it stays ignored)."""
    cases = [{"id": damage, "damage": damage} for damage in PLANTED]
    job = tmp_path / "job.json"
    job.write_text(
        json.dumps(
            {
                "mode": "plant",
                "model": str(small_file),
                "folder": str(tmp_path / "records"),
                "cases": cases,
            }
        )
    )
    got = _supervise.run(
        "_record_worker.py",
        PLANTED,
        [str(job)],
        item_seconds=60.0,
        memory_bytes=MEMORY_LIMIT,
    )
    want = {
        damage: {"load": "loaded", "written_here": False, "probed": True, "rewritten": True}
        for damage in PLANTED
    }
    want["folder"]["rewritten"] = False
    answers = {
        k: {f: v.get(f) for f in ("load", "written_here", "probed", "rewritten")}
        | ({"outcome": v["outcome"]} if "outcome" in v else {})
        for k, v in got.items()
    }
    assert answers == want


def test_a_users_private_group_may_write_the_folder(monkeypatch) -> None:
    """umask 002 systems (user private groups) make ``~/.cache`` group-writable: accepted only
    when the group is the user's own (named like the user, no other member, no other user's
    primary group, never root's)."""
    import types

    def fake(users: list[tuple[str, int, int]], groups: dict[int, tuple[str, list[str]]]):
        entry = [types.SimpleNamespace(pw_name=n, pw_uid=u, pw_gid=g) for n, u, g in users]
        pwd = types.SimpleNamespace(
            getpwuid=lambda uid: next(e for e in entry if e.pw_uid == uid),
            getpwall=lambda: entry,
        )
        grp = types.SimpleNamespace(
            getgrgid=lambda gid: types.SimpleNamespace(
                gr_name=groups[gid][0], gr_mem=groups[gid][1]
            )
        )
        monkeypatch.setitem(sys.modules, "pwd", pwd)
        monkeypatch.setitem(sys.modules, "grp", grp)
        _dirs._own_group.cache_clear()

    fake([("ann", 1000, 1000)], {1000: ("ann", [])})
    assert _dirs._own_group(1000, 1000)
    fake([("ann", 1000, 1000), ("bob", 1001, 1000)], {1000: ("ann", [])})
    assert not _dirs._own_group(1000, 1000)  # bob's primary group too
    fake([("ann", 1000, 1000)], {1000: ("ann", ["bob"])})
    assert not _dirs._own_group(1000, 1000)  # bob is a member
    fake([("ann", 1000, 1000)], {1000: ("staff", [])})
    assert not _dirs._own_group(1000, 1000)  # a shared group
    fake([("root", 0, 0)], {0: ("root", [])})
    assert not _dirs._own_group(0, 0)
    monkeypatch.undo()
    _dirs._own_group.cache_clear()
