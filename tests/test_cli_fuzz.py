"""Fuzz of the `nbcompile` command's file inputs (issue 29): `.npy` arrays and notebooks.

Valid `.npy` files and notebooks are mutated (header text, byte flips, truncation, JSON nodes
replaced by values of other types, deep nesting) and fed to the CLI's reading functions —
``cli.read_input`` and ``render.parse_notebook`` (plus the sanitising export for part of the
notebooks) — in a child process with a memory limit and a time limit, over 1,000 cases; a
handful go through the real ``nbcompile`` command in supervised children. Every case must end
in a value or an NBC code: never another exception, a crash, or unbounded memory or time.
"""

from __future__ import annotations

import copy
import io
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
NPY_CASES = 800
NOTEBOOK_CASES = 300
EXPORTED_CASES = 10  # of the notebooks that parse, this many also go through the export
WANT = {"shape": ["b", 3], "dtype": "float32"}
CODES = {"npy": {"NBC507", "NBC520"}, "notebook": {"NBC522", "NBC523"}}


# ----------------------------------------------------------------------------------- mutators
def _npy(arr: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, arr, allow_pickle=False)
    return out.getvalue()


_SEEDS = [
    np.arange(12, dtype=np.float32).reshape(4, 3),
    np.ones((1, 3), np.float32),
    np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)),
    np.zeros((0, 3), np.float32),
    np.arange(5, dtype=np.int64),
    np.float32(2.5),
    np.ones((2, 3), np.complex64),
]
_HEADER_SWAPS = [
    ("'<f4'", "'>f4'"),
    ("'<f4'", "'|O'"),
    ("'<f4'", "'<U3'"),
    ("'<f4'", "'|V12'"),
    ("'<f4'", "[('a', '<f4')]"),
    ("'<f4'", "'<f8'"),
    ("'<f4'", "'bogus'"),
    ("(4, 3)", "(1000000000000, 3)"),
    ("(4, 3)", "(-4, 3)"),
    ("(4, 3)", "(4, 3, 5)"),
    ("(4, 3)", "(4.5, 3)"),
    ("(4, 3)", "('4', 3)"),
    ("(4, 3)", "(" + "(" * 300 + ")" * 300 + ")"),
    ("(4, 3)", "(2**62, 2**62)"),
    ("(4, 3)", "(4, 2)"),
    ("False", "True"),
    ("False", "'yes'"),
    ("'descr'", "'descx'"),
    ("{", "["),
]


def _mutate_npy(rng: random.Random) -> bytes:
    data = bytearray(_npy(rng.choice(_SEEDS)))
    kind = rng.randrange(6)
    if kind == 0:  # swap a header value
        old, new = rng.choice(_HEADER_SWAPS)
        head_end = data.index(b"\n") + 1
        head = bytes(data[:head_end]).replace(old.encode(), new.encode())
        length = len(head) - 10
        if rng.random() < 0.7:  # keep the length field consistent
            head = head[:8] + length.to_bytes(2, "little") + head[10:]
        return head + bytes(data[head_end:])
    if kind == 1:  # flip bytes anywhere
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    if kind == 2:  # truncate
        return bytes(data[: rng.randrange(len(data) + 1)])
    if kind == 3:  # the version or the header length field
        data[6] = rng.choice([0, 1, 2, 3, 9, 255])
        data[8] = rng.randrange(256)
        data[9] = rng.randrange(256)
        return bytes(data)
    if kind == 4:  # garbage appended, or a whole random file
        return bytes(data) + rng.randbytes(rng.randrange(64))
    return rng.randbytes(rng.randrange(256))


def _notebook() -> dict[str, Any]:
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

    return json.loads(
        json.dumps(
            new_notebook(
                cells=[
                    new_markdown_cell("# T\n\n<img src=x onerror=alert(1)> [a](https://x.y)"),
                    new_code_cell(
                        "f(x)",
                        outputs=[
                            new_output(
                                "display_data",
                                data={
                                    "text/html": "<b>v</b><script>alert(2)</script>",
                                    "text/plain": "v",
                                    "image/png": "iVBORw0KGgo=",
                                },
                                metadata={"image/png": {"width": 10}},
                            ),
                            new_output("stream", name="stdout", text="out\n"),
                            new_output("error", ename="E", evalue="v", traceback=["tb"]),
                        ],
                    ),
                ]
            )
        )
    )


_ODD_VALUES: list[Any] = [
    None,
    0,
    -1,
    2**70,
    1.5,
    "",
    "x",
    [],
    {},
    [None],
    {"a": {}},
    True,
    "<script>alert(3)</script>",
]


def _nodes(value: Any, path: tuple = ()) -> list[tuple]:
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _nodes(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += _nodes(item, (*path, i))
    return found


def _mutate_notebook(rng: random.Random) -> bytes:
    nb = _notebook()
    kind = rng.randrange(5)
    if kind <= 1:  # replace a node (or a key) by an odd value
        for _ in range(rng.randint(1, 3)):
            path = rng.choice(_nodes(nb)[1:])
            parent = nb
            for key in path[:-1]:
                parent = parent[key]
            if isinstance(parent, dict) and rng.random() < 0.2:
                parent.pop(path[-1])
            else:
                parent[path[-1]] = copy.deepcopy(rng.choice(_ODD_VALUES))
        return json.dumps(nb).encode()
    if kind == 2:  # nesting
        depth = rng.choice([10, 60, 70, 1000, 100_000])
        nested = "[" * depth + "]" * depth
        text = json.dumps(nb).replace('"metadata": {}', f'"metadata": {{"x": {nested}}}', 1)
        return text.encode()
    data = bytearray(json.dumps(nb).encode())
    if kind == 3:  # flip bytes
        for _ in range(rng.randint(1, 6)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    return bytes(data[: rng.randrange(len(data) + 1)])


# -------------------------------------------------------------------- the in-process worker
def _runnable(page: str) -> list[str]:
    """Script of the notebook's in ``page``: script text, on* handlers, javascript: URLs."""
    import html.parser

    found: list[str] = []

    class Parser(html.parser.HTMLParser):
        in_script = False

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            self.in_script = tag == "script"
            for name, value in attrs:
                text = (value or "").strip().lower()
                if name.startswith("on") or text.startswith("javascript:"):
                    found.append(f"{tag} {name}={value}")

        def handle_data(self, data: str) -> None:
            if self.in_script and "alert(" in data:
                found.append(data[:200])

    parser = Parser()
    parser.feed(page)
    parser.close()
    return found


def _outcome(fn: Any, codes: set[str]) -> str:
    from nbcompile.errors import NbcompileError

    try:
        fn()
    except NbcompileError as err:
        return err.code if err.code in codes else f"wrong code {err.code}"
    except BaseException as err:  # the failure this fuzz looks for
        return f"raised {type(err).__name__}: {str(err)[:200]}"
    return "ok"


def worker(seed: int) -> dict[str, Any]:
    """Run every in-process case; return the outcome counts and the failures."""
    from nbcompile import cli, render

    rng = random.Random(seed)
    counts: dict[str, int] = {}
    failures: list[dict[str, Any]] = []
    folder = Path(tempfile.mkdtemp(prefix="nbc-cli-fuzz-"))
    path = folder / "x.npy"
    for case in range(NPY_CASES):
        data = _mutate_npy(rng)
        path.write_bytes(data)
        want = WANT if case % 2 else None
        got = _outcome(lambda w=want: cli.read_input(str(path), w), CODES["npy"])
        counts[f"npy {got}"] = counts.get(f"npy {got}", 0) + 1
        if got != "ok" and got not in CODES["npy"]:
            failures.append({"case": f"npy {case}", "outcome": got, "data": data[:300].hex()})
    exported = 0
    for case in range(NOTEBOOK_CASES):
        data = _mutate_notebook(rng)

        def run(data: bytes = data) -> None:
            nonlocal exported
            nb = render.parse_notebook(data)
            if exported < EXPORTED_CASES:
                exported += 1
                render.strip_widgets(nb)
                render.sanitize_outputs(nb)
                page = render.to_html(nb, trusted=False)
                assert render.remote_references(page) == []
                assert _runnable(page) == [], _runnable(page)

        got = _outcome(run, CODES["notebook"])
        counts[f"notebook {got}"] = counts.get(f"notebook {got}", 0) + 1
        if got != "ok" and got not in CODES["notebook"]:
            failures.append({"case": f"notebook {case}", "outcome": got, "data": data[:300].hex()})
    counts["exported"] = exported
    return {"counts": counts, "failures": failures}


_CHILD = """
import json, resource, sys
sys.setrecursionlimit(1000)
from tests.test_cli_fuzz import worker
import nbconvert, bleach  # imported before the limit
with open("/proc/self/statm") as f:
    vm = int(f.read().split()[0]) * resource.getpagesize()
limit = vm + (1 << 30)  # no case may need a GiB more
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
print(json.dumps(worker(int(sys.argv[1]))))
"""


def _env() -> dict[str, str]:
    return dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")


def test_fuzz_npy_and_notebook_inputs_in_process() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, "29"],
        capture_output=True,
        text=True,
        timeout=600,
        env=_env(),
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    counts = result["counts"]
    assert result["failures"] == [], result["failures"][:5]
    total = sum(n for key, n in counts.items() if key != "exported")
    assert total == NPY_CASES + NOTEBOOK_CASES >= 1000
    # the fuzz reaches every outcome: arrays read, both refusals, notebooks parsed and refused
    for key in ("npy ok", "npy NBC507", "npy NBC520", "notebook ok", "notebook NBC522"):
        assert counts.get(key, 0) >= 10, counts
    assert counts["exported"] == EXPORTED_CASES


# ---------------------------------------------------------- a handful through the real command
# The command runs under this wrapper, which writes its own peak resident size (VmHWM) when it
# exits. Neither RUSAGE_CHILDREN (the largest child the test process ever had) nor wait4's
# ru_maxrss (on Linux it keeps the hiwater mark of the image replaced at exec: the test process
# itself, several GB deep into the suite) measures the command.
_PEAK = """
import atexit, runpy, sys
out = sys.argv.pop(1)
def peak():
    with open("/proc/self/status") as f:
        kib = [ln.split()[1] for ln in f if ln.startswith("VmHWM:")]
    with open(out, "w") as f:
        f.write(kib[0])
atexit.register(peak)
sys.argv[0] = "nbcompile"
runpy.run_module("nbcompile.cli", run_name="__main__")
"""


def _command(args: list[str], cwd: Path) -> tuple[int, str, int]:
    """``nbcompile ARGS`` in a child: (status, stderr, the command's own peak resident KiB)."""
    peak = cwd / ".peak"
    peak.unlink(missing_ok=True)
    proc = subprocess.run(
        [sys.executable, "-c", _PEAK, str(peak), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(),
        cwd=cwd,
        check=False,
    )
    assert peak.exists(), f"the command ended without exiting normally: {proc.returncode}"
    return proc.returncode, proc.stderr, int(peak.read_text())


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from nbcompile.frozen import freeze

    path = tmp_path_factory.mktemp("fuzzcli") / "m.nbc"
    freeze(
        lambda w, x: x @ w,
        np.ones((3, 2), np.float32),
        np.ones((4, 3), np.float32),
        path=path,
        measure_compiled=False,
    )
    return path


def test_mutated_inputs_through_the_real_command(model: Path, tmp_path: Path) -> None:
    rng = random.Random(7)
    inputs = [
        _mutate_npy(rng),
        _npy(np.ones((4, 3), ">f4")),
        _npy(np.ones((4, 3), np.float32))[:100] + b"\0" * 60,
    ]
    for i, data in enumerate(inputs):
        (tmp_path / f"x{i}.npy").write_bytes(data)
        code, err, peak_kib = _command(
            ["run", str(model), "--input", f"x{i}.npy", "--output", f"y{i}.npy"], tmp_path
        )
        assert code in (0, 1) and "Traceback" not in err, err[-2000:]
        assert code == 0 or "[NBC5" in err, err
        assert peak_kib < 4 << 20, peak_kib
    notebooks = [
        _mutate_notebook(rng),
        b'{"nbformat": 4, "cells": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",
        json.dumps({"nbformat": 99, "nbformat_minor": 0, "metadata": {}, "cells": []}).encode(),
    ]
    for i, data in enumerate(notebooks):
        (tmp_path / f"n{i}.ipynb").write_bytes(data)
        code, err, peak_kib = _command(
            ["render", f"n{i}.ipynb", "-o", f"n{i}.html", "--no-execute"], tmp_path
        )
        assert code in (0, 1) and "Traceback" not in err, err[-2000:]
        assert code == 0 or "[NBC52" in err, err
        assert peak_kib < 4 << 20, peak_kib
