"""`describe`: what a `.nbc` file holds, with the program's facts read from the program.

Used by ``nbcompile inspect``. Everything the file says about itself is checked first (header,
digests, manifest, weight layout, weights vs manifest); the program is then probed in the same
forked child as `load` uses, its custom calls are checked, and its op count and custom calls
are reported from the program: a manifest that claims otherwise is refused, never shown.
No platform needs to be available (a TPU-only file can be described on a laptop).
"""

from __future__ import annotations

import os
from typing import Any

from nbcompile.frozen import _batch, _budget, _format, _load, _manifest, _safetensors

__all__ = ["describe", "leaf_names", "shape_text"]


def describe(path: str | os.PathLike[str], *, max_bytes: int | None = None) -> dict[str, Any]:
    """Facts of a `.nbc` file (JSON-ready); FreezeError if the file is refused."""
    budget = _budget.resolve(max_bytes)
    sections = _format.check_sections(_format.read_file(path, budget))
    manifest = _manifest.parse(sections.manifest, sections.format_version)
    tensors, data_start = _safetensors.parse(sections.weights)
    _load.match_weights(manifest, tensors)
    _load.check_version_window(manifest["writer"])
    checked = _load.Checked(manifest, tensors, data_start, sections, platform="")
    _, facts, _ = _load.check_program(checked)
    return {
        "path": os.fspath(path),
        "format_version": sections.format_version,
        "file_bytes": sections.file_bytes,
        "sections": {
            "header": _format.HEADER_SIZE,
            "manifest": len(sections.manifest),
            "weights": len(sections.weights),
            "program": len(sections.program),
        },
        "weight_bytes": sum(t.end - t.start for t in tensors),
        "manifest": manifest,
        # read from the program itself (the manifest's claims were checked against these)
        "program": {
            "stablehlo_ops": facts.ops,
            "longest_chain": facts.chain,
            "nesting": facts.nesting,
            "custom_calls": facts.targets,
        },
    }


def leaf_names(tree: dict[str, Any]) -> list[str]:
    """Key-path names of a signature tree's leaves (``[0]['x']``), in input order."""
    return _manifest.leaf_paths(tree)


def shape_text(shape: list[int | str]) -> str:
    """``[b, 32]`` text of a signature shape."""
    return _batch.show(shape)
