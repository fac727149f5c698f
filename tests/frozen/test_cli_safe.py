"""`nbcompile inspect` / `run` with hostile names, endless programs and lying manifests:
nothing from a file reaches the terminal raw, nothing hangs past its timeout, and the program's
own facts are shown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nbcompile import cli
from nbcompile.frozen import freeze

from ._craft import edit_manifest, program_file
from ._hostile import forever

EVIL = "m\x1b[31mRED\x07\u202eolleh\ud800\nverification: ok"
RAW = ("\x1b", "\x07", "\u202e")


def _cli(*args: str, encoding: str = "utf-8", timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONIOENCODING=encoding, LANG="C")
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    return subprocess.run(
        [sys.executable, "-m", "nbcompile.cli", *args],
        capture_output=True,
        timeout=timeout,
        env=env,
        check=False,
    )


@pytest.fixture(scope="module")
def evil_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("cli")
    path = folder / "evil.nbc"
    freeze(
        lambda p, x: {EVIL.replace("\ud800", ""): x @ p[EVIL.replace("\ud800", "")]},
        {EVIL.replace("\ud800", ""): np.ones((3, 2), np.float32)},
        np.ones((4, 3), np.float32),
        path=path,
        measure_compiled=False,
    )

    def rename(m: dict) -> None:
        m["name"] = EVIL  # a lone surrogate only JSON can carry
        m["created_utc"] = "\x1b]0;title\x07"

    path.write_bytes(edit_manifest(path.read_bytes(), rename))
    return path


@pytest.mark.parametrize("encoding", ["utf-8", "ascii"])
def test_inspect_escapes_every_string(evil_file: Path, encoding: str) -> None:
    proc = _cli("inspect", str(evil_file), encoding=encoding)
    out, err = proc.stdout.decode(encoding, "replace"), proc.stderr.decode(encoding, "replace")
    assert proc.returncode == 0, err[-2000:]
    for raw in RAW:
        assert raw not in out and raw not in err
    assert "\\x1b[31mRED\\x07\\u202eolleh\\ud800\\x0averification: ok" in out, out
    # the newline in the name cannot forge a line of the report (ours are indented)
    assert not any(line.startswith("verification") for line in out.splitlines()), out
    as_json = _cli("inspect", str(evil_file), "--json", "--no-verify", encoding=encoding)
    assert as_json.returncode == 0 and not any(
        ord(c) > 127 or c == "\x1b" for c in as_json.stdout.decode()
    )
    assert json.loads(as_json.stdout)["manifest"]["name"] == EVIL


def test_refusal_messages_are_escaped_too(evil_file: Path, tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.nbc"
    # the weights section no longer matches the manifest: the refusal names the evil weight
    bad.write_bytes(
        edit_manifest(evil_file.read_bytes(), lambda m: m["weights"][0].update(shape=[2, 3]))
    )
    assert cli.main(["inspect", str(bad), "--no-verify"]) == 1
    err = capsys.readouterr().err
    assert "[NBC504]" in err and "\\x1b[31mRED" in err and not any(r in err for r in RAW)


def test_run_times_out_on_an_endless_program(tmp_path: Path) -> None:
    scalar = [jax.ShapeDtypeStruct((), np.float32)]
    path = tmp_path / "forever.nbc"
    path.write_bytes(program_file(forever(), scalar, scalar))
    np.save(tmp_path / "x.npy", np.float32(1.0))
    start = time.monotonic()
    proc = _cli("run", str(path), "--input", str(tmp_path / "x.npy"), "--timeout", "3", timeout=60)
    took = time.monotonic() - start
    assert proc.returncode == 1 and b"[NBC508]" in proc.stderr and b"3 s" in proc.stderr, (
        proc.stderr
    )
    assert took < 30, took
    start = time.monotonic()
    proc = _cli("inspect", str(path), "--timeout", "3", timeout=60)
    assert proc.returncode == 1 and b"verification: FAILED" in proc.stdout, proc.stdout
    assert time.monotonic() - start < 30
    assert cli.INSPECT_TIMEOUT_S <= 60 and cli.RUN_TIMEOUT_S <= 600


def test_inspect_shows_the_programs_custom_calls_and_refuses_a_lying_manifest(
    tmp_path: Path, capsys
) -> None:
    path = tmp_path / "solve.nbc"
    a = np.eye(4, dtype=np.float32) * 3
    freeze(
        lambda p, b: jnp.linalg.solve(p, b),
        a,
        np.ones((4, 2), np.float32),
        path=path,
        batch="static",
        measure_compiled=False,
    )
    assert cli.main(["inspect", str(path), "--no-verify"]) == 0
    out = capsys.readouterr().out
    assert "lapack_sgetrf_ffi" in out and "lapack_strsm_ffi" in out, out
    lie = tmp_path / "lie.nbc"
    lie.write_bytes(
        edit_manifest(path.read_bytes(), lambda m: m["program"].update(custom_calls=[]))
    )
    assert cli.main(["inspect", str(lie), "--no-verify"]) == 1
    err = capsys.readouterr().err
    assert (
        "[NBC500]" in err and "manifest lists custom calls []" in err and "lapack_sgetrf_ffi" in err
    )
