"""`verify`: load and call a `.nbc` file in a child process and report what happened.

Running the check in a subprocess means a native crash (or a hang, up to ``timeout``) in JAX,
XLA or MLIR while reading a hostile file cannot take the caller down.
Child entry point: ``python -m nbcompile.frozen._verify PATH [--input X.npy ...]``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

_MARK = "NBCOMPILE-VERIFY "
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return env


def verify(
    path: str | os.PathLike[str],
    inputs: Sequence[Any] | None = None,
    *,
    timeout: float = 300.0,
    platform: str | None = None,
) -> dict[str, Any]:
    """Load ``path`` and call it in a fresh process; return a JSON-ready report.

    ``inputs`` are the model's input leaves in signature order (default: zeros of the right
    shapes, with batch size ``b`` = 2 for a model frozen with a symbolic batch). The report has ``ok``, ``code`` (the FreezeError code or None), ``message``,
    ``outputs`` (shape, dtype, all-finite per output leaf), timings, ``returncode`` and
    ``crashed`` / ``timed_out`` flags.
    """
    report: dict[str, Any] = {"path": os.fspath(path), "ok": False, "code": None, "message": ""}
    with tempfile.TemporaryDirectory(prefix="nbcompile-verify-") as tmp:
        cmd = [sys.executable, "-m", "nbcompile.frozen._verify", os.fspath(path)]
        if platform:
            cmd += ["--platform", platform]
        for i, value in enumerate(inputs or ()):
            file = Path(tmp) / f"input{i}.npy"
            np.save(file, np.asarray(value), allow_pickle=False)
            cmd += ["--input", str(file)]
        start = time.perf_counter()
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=timeout, env=_child_env(), check=False
            )
        except subprocess.TimeoutExpired:
            report.update(
                timed_out=True,
                crashed=False,
                returncode=None,
                message=f"no answer within {timeout:.0f} s",
            )
            return report
    report["seconds"] = round(time.perf_counter() - start, 3)
    report["returncode"] = proc.returncode
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(_MARK)]
    if lines:
        report.update(json.loads(lines[-1][len(_MARK) :]))
        report.update(crashed=False, timed_out=False)
    else:
        tail = proc.stderr.strip().splitlines()[-5:]
        report.update(
            crashed=True,
            timed_out=False,
            message=f"the loader process died (exit {proc.returncode}): " + " | ".join(tail),
        )
    return report


def _finite(x: np.ndarray) -> bool:
    try:
        return bool(np.isfinite(x).all())
    except TypeError:
        return True


#: The batch size ``b`` of the zero inputs `verify` makes for a model with a symbolic batch.
ZEROS_BATCH = 2


def _zeros(signature: dict[str, Any]) -> list[np.ndarray]:
    from nbcompile.frozen._batch import concrete_shape

    return [
        np.zeros(concrete_shape(leaf["shape"], ZEROS_BATCH), dtype=leaf["dtype"])
        for leaf in signature["inputs"]["leaves"]
    ]


def _child(argv: Sequence[str]) -> dict[str, Any]:
    import argparse

    parser = argparse.ArgumentParser(prog="nbcompile.frozen._verify")
    parser.add_argument("path")
    parser.add_argument("--input", action="append", default=[])
    parser.add_argument("--platform")
    args = parser.parse_args(argv)

    import jax

    from nbcompile.errors import FreezeError
    from nbcompile.frozen import _manifest, load

    try:
        start = time.perf_counter()
        model = load(args.path, platform=args.platform)
        loaded = time.perf_counter()
        leaves = [np.load(p, allow_pickle=False) for p in args.input] or _zeros(model.signature)
        tree = model.signature["inputs"]["tree"]
        if len(leaves) != len(model.signature["inputs"]["leaves"]):
            raise FreezeError(
                f"{len(leaves)} inputs given, the model takes {len(model.signature['inputs']['leaves'])}",
                code="NBC507",
            )
        out = model(*_manifest.unflatten(tree, leaves))
        flat = jax.block_until_ready(jax.tree_util.tree_leaves(out))
        done = time.perf_counter()
    except FreezeError as err:
        return {"ok": False, "code": err.code, "message": str(err)}
    except Exception as err:
        return {"ok": False, "code": None, "message": f"{type(err).__name__}: {err}"}
    return {
        "ok": True,
        "code": None,
        "message": "loaded and ran",
        "platform": model.platform,
        "name": model.metadata["name"],
        "outputs": [
            {"shape": list(x.shape), "dtype": str(x.dtype), "finite": _finite(np.asarray(x))}
            for x in flat
        ],
        "load_seconds": round(loaded - start, 3),
        "call_seconds": round(done - loaded, 3),
    }


if __name__ == "__main__":
    print(_MARK + json.dumps(_child(sys.argv[1:])), flush=True)
