"""Source locations in a frozen program without the freezing machine's paths.

``jax.export`` keeps the debug locations of every operation (``loc("/home/ann/work/model.py"
:12:4)``, call sites through nbcompile and the user's packages). A frozen file must not carry
the freezing machine's paths, so ``freeze`` rewrites every file location before writing:

- a file inside a ``site-packages`` / ``dist-packages`` folder keeps its path from there
  (``flax/linen/module.py``); a file of nbcompile keeps ``nbcompile/...``;
- any other file keeps only its base name (``model.py``; a notebook cell ``3412.py``);
- line and column numbers and the operation names (``jit(predict)/MLP/dense``, the module
  paths a user reads) are kept.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
# A file location as MLIR prints it: "FILE":LINE:COL (a name location is "NAME" or "NAME"(...)).
_FILE_LOC = re.compile(r'"((?:[^"\\]|\\.)*)":(\d+):(\d+)')
_PACKAGES = re.compile(r"^.*[\\/](?:site|dist)-packages[\\/]")


def clean_path(path: str) -> str:
    """The part of ``path`` that says something to a reader on another machine."""
    if not path or path.startswith("<") or ("/" not in path and "\\" not in path):
        return path
    packaged = _PACKAGES.sub("", path)
    if packaged != path:
        return packaged.replace("\\", "/")
    if path.startswith(_PACKAGE_ROOT + os.sep):
        return path[len(_PACKAGE_ROOT) + 1 :].replace("\\", "/")
    return re.split(r"[\\/]", path)[-1]


def _replace(match: re.Match[str]) -> str:
    return f'"{clean_path(match[1])}":{match[2]}:{match[3]}'


def strip_module_text(text: str) -> str:
    """Module text (printed with debug info) with every file location's path cleaned."""
    return _FILE_LOC.sub(_replace, text)


def strip_exported(exported: Any) -> Any:
    """``exported`` with the machine paths removed from its program's locations."""
    import dataclasses

    from jax._src.lib.mlir import ir

    from nbcompile.frozen import _jaxcompat

    with _jaxcompat.single_threaded_context():
        module = _jaxcompat.parse_artifact(exported.mlir_module_serialized)
        text = module.operation.get_asm(enable_debug_info=True)
        cleaned = ir.Module.parse(strip_module_text(text))
        serialized = _jaxcompat.serialize_module(cleaned)
    return dataclasses.replace(exported, mlir_module_serialized=serialized)
