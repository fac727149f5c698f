"""Every child process nbcompile starts runs isolated from the current folder and from the
user's Python customisations: a module planted beside a downloaded file never runs.

nbcompile starts one kind of child with a new interpreter: the `verify` child (``nbcompile
inspect``, ``nbcompile.verify``). The other children are forks of the calling process
(``frozen/_sandbox.py``), which start no interpreter and import nothing new. The attack: a
folder holding ``model.nbc`` and a ``json.py`` (or any module the child imports); before the
fix the child started as ``python -m nbcompile.frozen._verify``, with the current folder first
on ``sys.path``, and ran the planted file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from nbcompile.frozen import _verify

from .helpers import freeze_small_matmul

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("model") / "model.nbc"
    return freeze_small_matmul(path)


def _child_imports(model: Path, cwd: Path) -> set[str]:
    """Top-level names of every module the verify child imports, read from the child itself
    (``python -X importtime``)."""
    cmd = _verify.child_command([str(model)])
    cmd[1:1] = ["-X", "importtime"]
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
        timeout=300,
        check=False,
    )
    assert _verify._MARK + '{"ok": true' in proc.stdout, proc.stdout + proc.stderr[-2000:]
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name and name != "package":  # the header line
                names.add(name.split(".")[0])
    return names


def _plant(folder: Path, names: set[str], marker: Path) -> None:
    """A module for each name whose import leaves a line in ``marker`` (builtins only)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / f"{name}.py").write_text(
            f"open({str(marker)!r}, 'a').write({name!r} + '\\n')\n", encoding="utf-8"
        )


@pytest.fixture(scope="module")
def planted(model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A current folder with the model and a module named like every module the child
    imports (the standard library's and the rest), plus the same in ``$PYTHONPATH`` and a
    user site-packages folder with ``usercustomize`` and a ``.pth`` file."""
    base = tmp_path_factory.mktemp("planted")
    marker = base / "MARKER"
    cwd = base / "download"
    names = _child_imports(model, tmp_path_factory.mktemp("neutral"))
    assert {"json", "os", "importlib", "numpy", "jax"} <= names, sorted(names)
    assert len(names & set(sys.stdlib_module_names)) > 50, sorted(names)
    names |= {"sitecustomize", "usercustomize"}
    _plant(cwd, names, marker)
    (cwd / "model.nbc").write_bytes(model.read_bytes())
    _plant(base / "pythonpath", names, marker)
    user_site = Path(
        sysconfig.get_path("purelib", f"{os.name}_user", {"userbase": str(base / "userbase")})
    )
    _plant(user_site, {"usercustomize"}, marker)
    (user_site / "planted.pth").write_text(
        f"import builtins; open({str(marker)!r}, 'a').write('pth\\n')\n", encoding="utf-8"
    )
    return {"cwd": cwd, "marker": marker, "pythonpath": base / "pythonpath", "base": base}


def _run(argv: list[str], planted: dict[str, Path], **env: str) -> subprocess.CompletedProcess:
    """Run ``argv`` in the planted folder (the caller itself isolated with ``-I`` where it is
    a ``python`` command, so only a child can import the planted modules)."""
    full = dict(os.environ, JAX_PLATFORMS="cpu", **env)
    full.pop("PYTHONPATH", None)
    full.update(env)
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        cwd=planted["cwd"],
        env=full,
        timeout=300,
        check=False,
    )


def _assert_nothing_ran(planted: dict[str, Path]) -> None:
    marker = planted["marker"]
    ran = marker.read_text() if marker.exists() else ""
    assert not ran, f"planted modules ran: {sorted(set(ran.split()))}"


def test_inspect_in_a_folder_with_planted_modules_runs_none_of_them(planted) -> None:
    """The issue's case: ``nbcompile inspect model.nbc`` in the download's folder."""
    script = Path(sys.executable).parent / "nbcompile"
    assert script.exists()
    proc = _run([str(script), "inspect", "model.nbc"], planted)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert "verification: ok" in proc.stdout, proc.stdout
    _assert_nothing_ran(planted)


def test_verify_ignores_the_current_folder_pythonpath_and_user_site(planted) -> None:
    """``nbcompile.verify`` from a caller in that folder, with ``$PYTHONPATH`` and a user
    site-packages folder (``usercustomize``, a ``.pth``) full of planted modules."""
    code = "import json, nbcompile; print(json.dumps(nbcompile.verify('model.nbc')))"
    proc = _run(
        [sys.executable, "-I", "-c", code],
        planted,
        PYTHONPATH=str(planted["pythonpath"]),
        PYTHONUSERBASE=str(planted["base"] / "userbase"),
        PYTHONSTARTUP=str(planted["pythonpath"] / "json.py"),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["ok"] and report["outputs"] == [
        {"shape": [2, 4], "dtype": "float32", "finite": True}
    ], report
    _assert_nothing_ran(planted)


def test_inspect_through_python_dash_m_still_checks_in_an_isolated_child(planted) -> None:
    """The CLI itself run isolated (``python -I -m nbcompile.cli``): its child must be too."""
    proc = _run(
        [sys.executable, "-I", "-m", "nbcompile.cli", "inspect", "model.nbc"],
        planted,
        PYTHONPATH=str(planted["pythonpath"]),
        PYTHONUSERBASE=str(planted["base"] / "userbase"),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert "verification: ok" in proc.stdout, proc.stdout
    _assert_nothing_ran(planted)


def test_the_child_imports_nbcompile_from_the_callers_package() -> None:
    """No folder the child would search first holds another nbcompile: it is pinned."""
    cmd = _verify.child_command(["--help"])
    assert cmd[:3] == [sys.executable, "-I", "-c"]
    assert cmd[4] == json.dumps(_verify._import_folders())
    assert Path(cmd[5]) == ROOT / "nbcompile"
    assert os.getcwd() not in json.loads(cmd[4])
