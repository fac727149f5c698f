"""`nbcompile inspect` / `nbcompile run` exit codes and output, and `verify` reports."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nbcompile.cli import main
from nbcompile.frozen import verify

from ._craft import flip, section_offset
from .conftest import run_python


@pytest.fixture(scope="module")
def corrupt(mlp_file: Path, frozen_dir: Path) -> Path:
    data = mlp_file.read_bytes()
    off, length = section_offset(data, 2)
    path = frozen_dir / "corrupt.nbc"
    path.write_bytes(flip(data, off + length // 2))
    return path


def test_verify_ok_and_refused(mlp_file: Path, corrupt: Path, tpu_only_file: Path) -> None:
    good = verify(mlp_file)
    assert good["ok"] and good["code"] is None and not good["crashed"], good
    # mlp_file has a symbolic batch: verify's own zero inputs use b = 2.
    assert good["outputs"] == [{"shape": [2, 10], "dtype": "float32", "finite": True}]
    bad = verify(corrupt)
    assert not bad["ok"] and bad["code"] == "NBC501" and not bad["crashed"], bad
    assert verify(tpu_only_file)["code"] == "NBC503"


def test_verify_with_inputs_and_wrong_inputs(mlp_file: Path) -> None:
    x = np.full((4, 32), np.nan, np.float32)
    report = verify(mlp_file, inputs=[x])
    assert report["ok"] and report["outputs"][0]["finite"] is False
    assert verify(mlp_file, inputs=[x[:, :3]])["code"] == "NBC507"


def test_inspect(mlp_file: Path, corrupt: Path, capsys) -> None:
    assert main(["inspect", str(mlp_file)]) == 0
    out = capsys.readouterr().out
    for needle in (
        "format 1",
        "name: mlp",
        "jax 0.",
        "platforms: cpu, cuda, tpu",
        "inputs: [0] float32[b, 32]",
        "params['w1'] float32[32, 64]",
        "verification: ok",
    ):
        assert needle in out, (needle, out)
    assert main(["inspect", str(mlp_file), "--json", "--no-verify"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["manifest"]["name"] == "mlp" and info["verification"] is None
    assert info["file_bytes"] == mlp_file.stat().st_size


def test_cli_exit_codes(mlp_file: Path, corrupt: Path, tmp_path: Path) -> None:
    refused = run_python("-m", "nbcompile.cli", "inspect", str(corrupt))
    assert refused.returncode == 1 and "[NBC501]" in refused.stderr
    assert "Traceback" not in refused.stderr
    np.save(tmp_path / "x.npy", np.zeros((4, 32), np.float32))
    ran = run_python("-m", "nbcompile.cli", "run", str(corrupt), "--input", str(tmp_path / "x.npy"))
    assert ran.returncode == 1 and "[NBC501]" in ran.stderr and "Traceback" not in ran.stderr
    usage = run_python("-m", "nbcompile.cli", "run", str(mlp_file))
    assert usage.returncode == 2 and "--input" in usage.stderr
    assert run_python("-m", "nbcompile.cli", "render", "x.ipynb").returncode == 2


def test_cli_run_refuses_bad_inputs(mlp_file: Path, tmp_path: Path, capsys) -> None:
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    assert main(["run", str(mlp_file), "--input", str(tmp_path / "obj.npy")]) == 1
    err = capsys.readouterr().err  # a pickled object array is refused before unpickling
    assert "NBC507" in err and "not a numeric array" in err, err
    np.save(tmp_path / "x64.npy", np.zeros((4, 32)))  # float64 runs as float32, like jax.jit
    assert main(["run", str(mlp_file), "--input", str(tmp_path / "x64.npy")]) == 0
    capsys.readouterr()
    np.save(tmp_path / "i32.npy", np.zeros((4, 32), np.int32))  # a dtype the model does not take
    assert main(["run", str(mlp_file), "--input", str(tmp_path / "i32.npy")]) == 1
    assert "[NBC507]" in capsys.readouterr().err
    np.save(tmp_path / "wide.npy", np.zeros((4, 31), np.float32))  # a shape it does not take
    assert main(["run", str(mlp_file), "--input", str(tmp_path / "wide.npy")]) == 1
    assert "[NBC507]" in capsys.readouterr().err
    np.save(tmp_path / "x.npy", np.zeros((4, 32), np.float32))
    assert main(["run", str(mlp_file), "--input", str(tmp_path / "x.npy")]) == 0
    assert "float32[4, 10]" in capsys.readouterr().out
    assert main(["run", str(tmp_path / "missing.nbc"), "--input", str(tmp_path / "x.npy")]) == 1
