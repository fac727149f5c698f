"""Files the full loader fuzz (``make test-fuzz``) found, kept as regression inputs: each must be
refused with an NBC code or load, run and refuse differentiation, in a fresh process, with no
death by signal.

``fuzz_seed1_55099.nbc`` (2026-12-01, the full run with calls, seed 1, file 55,099): a
``program-bytes`` mutation of a two-input model (digests made valid) whose StableHLO passes the
forked parse check but crashed JAX's shape refinement (``refine_polymorphic_shapes``, C++) with
a segmentation fault at the first call, in the calling process. Fixed: a program from
elsewhere is lowered and shape-refined in a forked child before its first call at each input
shape (``FrozenModel._lower_in_child_first``), so the crash is a refusal (NBC500).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ..helpers import run_child

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data"
CHILD = (
    "import json, sys\n"
    "from _fuzz_worker import run_one\n"
    "print(json.dumps(run_one(open(sys.argv[1], 'rb').read())))\n"
)


def _answer(path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(HERE.parents[1])])
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=HERE,
        timeout=120,
        check=False,
    )


def test_program_that_crashes_shape_refinement_is_answered_safely():
    proc = _answer(DATA / "fuzz_seed1_55099.nbc")
    assert proc.returncode == 0, f"died with {proc.returncode}: {proc.stderr[-500:]}"
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    # it loads (every parse check passes), and its first call is refused, not a crash
    assert got == {"load": "loaded", "call": "NBC500", "grad": "NBC500"}, got


def test_the_refusal_names_the_step_and_the_shapes(tmp_path: Path) -> None:
    script = (
        "import numpy as np\n"
        "from nbcompile.errors import FreezeError\n"
        "from nbcompile.frozen import load\n"
        "m = load(__import__('sys').argv[1])\n"
        "leaves = [np.zeros([2 if d == 'b' else d for d in leaf['shape']], leaf['dtype'])\n"
        "          for leaf in m.signature['inputs']['leaves']]\n"
        "try:\n"
        "    m.call_leaves(leaves)\n"
        "except FreezeError as err:\n"
        "    print(err)\n"
    )
    proc = run_child(
        ["-X", "faulthandler", "-c", script, str(DATA / "fuzz_seed1_55099.nbc")],
        env={"NBCOMPILE_CHECKED_DIR": str(tmp_path)},
        timeout=120,
    )
    message = proc.stdout.strip()
    assert message.startswith("[NBC500]"), message
    assert "crashed JAX's lowering and shape refinement at inputs" in message, message
    assert "(signal 11)" in message, message
    assert "Fatal Python error" not in proc.stderr  # the child's crash is not dumped
    assert not list(tmp_path.rglob("*.shapes"))  # never recorded as checked
