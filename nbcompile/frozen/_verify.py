"""`verify`: load and call a `.nbc` file in a child process and report what happened.

Running the check in a subprocess means a native crash (or a hang, up to ``timeout``) in JAX,
XLA or MLIR while reading a hostile file cannot take the caller down.

The child runs isolated from the folder it was started in and from the user's Python
customisations: ``python -I`` (no current folder or script folder on ``sys.path``, no
``PYTHON*`` variables such as ``PYTHONPATH``, no user site-packages or ``usercustomize``), in a
fresh temporary folder, with nbcompile imported from this package's own folder and the
caller's other absolute import folders after the interpreter's own (so a ``json.py`` beside a
downloaded file is never imported). ``child_command`` builds the command line.
Child entry point: ``main(["PATH", "--input", "X.npy", ...])``.
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
#: this package's folder (``.../nbcompile``): the child imports nbcompile from exactly here
_PACKAGE = str(Path(__file__).resolve().parents[1])

# The child's first lines: only the standard library's own modules are imported before
# nbcompile is pinned to the caller's copy (a module object made from its file, nothing put
# on sys.path); the caller's absolute import folders come after the interpreter's own.
_BOOT = """import importlib.util, json, sys
sys.path += [p for p in json.loads(sys.argv[1]) if p not in sys.path]
spec = importlib.util.spec_from_file_location(
    "nbcompile", sys.argv[2] + "/__init__.py", submodule_search_locations=[sys.argv[2]])
package = importlib.util.module_from_spec(spec)
sys.modules["nbcompile"] = package
spec.loader.exec_module(package)
from nbcompile.frozen._verify import main
main(sys.argv[3:])
"""


def _import_folders() -> list[str]:
    """The caller's absolute import folders, never its current folder (nor a relative one)."""
    try:
        here = os.path.realpath(os.getcwd())
    except OSError:
        here = None
    return [
        p
        for p in sys.path
        if isinstance(p, str)
        and os.path.isabs(p)
        and os.path.realpath(p) != here
        and os.path.realpath(p) != os.path.dirname(_PACKAGE)
    ]


def child_command(args: Sequence[str]) -> list[str]:
    """The command line of an isolated child running ``main(args)`` (see the module doc)."""
    return [sys.executable, "-I", "-c", _BOOT, json.dumps(_import_folders()), _PACKAGE, *args]


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
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
        args = [os.path.abspath(path)]
        if platform:
            args += ["--platform", platform]
        for i, value in enumerate(inputs or ()):
            file = Path(tmp) / f"input{i}.npy"
            np.save(file, np.asarray(value), allow_pickle=False)
            args += ["--input", str(file)]
        start = time.perf_counter()
        try:
            proc = subprocess.run(
                child_command(args),
                capture_output=True,
                text=True,
                timeout=timeout,
                env=_child_env(),
                cwd=tmp,
                check=False,
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


def main(argv: Sequence[str]) -> None:
    """The child: check ``argv``'s file and print the report on one marked line."""
    print(_MARK + json.dumps(_child(argv)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
