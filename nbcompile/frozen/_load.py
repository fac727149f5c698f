"""`load`: check a `.nbc` file completely, then deserialise it into a callable `FrozenModel`.

Checks run in this order, each refusal a FreezeError with a stable code: size bounds, magic,
version, header digest, section table, section digests (`_format`); manifest schema; weight
section layout (`_safetensors`); weights vs manifest; version window; platform and device
count; then the program is probed in a forked child (`_program.probe`: every field of the
artifact, limits, functions, custom calls), its custom calls are checked against JAX's own
lowering (`_customcalls`), and only then is it deserialised here and its types checked.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from nbcompile.errors import FreezeError
from nbcompile.frozen import (
    _batch,
    _budget,
    _checked,
    _customcalls,
    _format,
    _jaxcompat,
    _manifest,
    _program,
    _safetensors,
    _sandbox,
)
from nbcompile.frozen._model import FrozenModel

#: Oldest writer JAX minor version accepted, counted back from the runtime's (~6 months).
OLDER_MINORS = 2
#: Newer writer JAX patch releases accepted within the runtime's minor version (~3 weeks).
NEWER_PATCHES = 1


@dataclass(frozen=True)
class Checked:
    """A file that passed every check that needs no deserialisation."""

    manifest: dict[str, Any]
    tensors: list[_safetensors.TensorInfo]
    data_start: int
    sections: _format.Sections
    platform: str


def check_version_window(writer: dict[str, Any]) -> None:
    """Refuse (NBC502) a writer JAX outside the runtime's jax.export compatibility window.

    jax.export reads artifacts up to ~6 months older and ~3 weeks newer than the runtime:
    expressed as versions, the writer's JAX must have the runtime's major version, a minor
    version at most ``OLDER_MINORS`` behind, and if newer at most ``NEWER_PATCHES`` patch
    releases ahead in the same minor; its export serialization version must not exceed the
    runtime's and its calling convention must be in the runtime's supported range.
    """
    runtime = _manifest.parse_version(jax.__version__)
    wrote = _manifest.parse_version(writer["jax"])
    fix = f"re-freeze the model with jax {jax.__version__}, or load it with jax {writer['jax']}"
    if wrote is None:
        raise FreezeError(f"writer jax version {writer['jax']!r} is not a version", code="NBC500")
    if runtime is not None:
        too_old = wrote[0] < runtime[0] or (
            wrote[0] == runtime[0] and wrote[1] < runtime[1] - OLDER_MINORS
        )
        too_new = wrote[:2] > runtime[:2] or (
            wrote[:2] == runtime[:2] and wrote[2] > runtime[2] + NEWER_PATCHES
        )
        if too_old or too_new:
            raise FreezeError(
                f"written with jax {writer['jax']}, outside the window this jax "
                f"{jax.__version__} can load ({'older' if too_old else 'newer'})",
                code="NBC502",
                hint=fix,
            )
    ours = _jaxcompat.serialization_version()
    if ours is not None and writer["export_serialization_version"] > ours:
        raise FreezeError(
            f"export serialization version {writer['export_serialization_version']} is newer "
            f"than this jax's {ours}",
            code="NBC502",
            hint=fix,
        )
    low, high = _jaxcompat.calling_convention_range()
    if not low <= writer["calling_convention_version"] <= high:
        raise FreezeError(
            f"calling convention version {writer['calling_convention_version']} outside this "
            f"jax's supported {low}..{high}",
            code="NBC502",
            hint=fix,
        )


def _pick_platform(manifest: dict[str, Any], wanted: str | None) -> str:
    platforms = manifest["platforms"]
    if wanted is not None:
        candidates = [wanted] if wanted in platforms else []
    else:
        local = _jaxcompat.export_platform(jax.devices()[0])
        candidates = [local] if local in platforms else []
        candidates += [p for p in platforms if p != local]
    for platform in candidates:
        devices = _jaxcompat.devices_for(platform)
        if devices:
            if len(devices) < manifest["device_count"]:
                raise FreezeError(
                    f"the program needs {manifest['device_count']} {platform} devices, "
                    f"{len(devices)} available",
                    code="NBC503",
                )
            return platform
    raise FreezeError(
        f"the file was lowered for {', '.join(platforms)}, none of which is available here"
        + (f" (asked for {wanted})" if wanted else ""),
        code="NBC503",
        hint="freeze it again with platforms including this machine's backend",
    )


def match_weights(manifest: dict[str, Any], tensors: list[_safetensors.TensorInfo]) -> None:
    stored = {t.name: t for t in tensors}
    for spec in manifest["weights"]:
        got = stored.pop(spec["name"], None)
        if got is None:
            raise FreezeError(
                f"weight {spec['name']!r} is missing from the weights section", code="NBC504"
            )
        if list(got.shape) != spec["shape"] or got.dtype != spec["dtype"]:
            raise FreezeError(
                f"weight {spec['name']!r} is {got.dtype}{list(got.shape)} in the weights section, "
                f"the manifest says {spec['dtype']}{spec['shape']}",
                code="NBC504",
            )
    if stored:
        raise FreezeError(
            f"unexpected tensor {next(iter(stored))!r} in the weights section", code="NBC504"
        )


def check_file(
    data: bytes | bytearray | memoryview,
    platform: str | None = None,
    *,
    defer_weights: bool = False,
) -> Checked:
    """Every check that needs no deserialisation (header, digests, layout, versions, platform).

    ``defer_weights``: the weight digest may still be running; ``sections.weights_checked()``
    must be called before the model is handed out (`FrozenModel` does).
    """
    sections = _format.check_sections(data, defer_weights=defer_weights)
    manifest = _manifest.parse(sections.manifest, sections.format_version)
    tensors, data_start = _safetensors.parse(sections.weights)
    match_weights(manifest, tensors)
    check_version_window(manifest["writer"])
    chosen = _pick_platform(manifest, platform)
    return Checked(manifest, tensors, data_start, sections, chosen)


def check_program(
    checked: Checked,
) -> tuple[jax.export.Exported, _program.ProgramFacts, bool]:
    """Probe the program in a child, check its facts and custom calls, then deserialise it.

    Returns the program, its facts, and whether ``freeze`` wrote it on this machine (else it
    is from elsewhere: its first call at each input shape is lowered in a child first).
    """
    manifest = checked.manifest
    program = checked.sections.program
    if len(program) < 8:
        raise FreezeError("program section is empty or truncated", code="NBC500")
    digest = checked.sections.program_sha256
    record = _checked.recall(digest)  # these exact bytes passed every program check before
    if record is not None and "largest_array" not in record:
        record = None  # recorded before the array-size and location limits: probe again
    if record is None:
        result = _sandbox.run_isolated(
            lambda: _program.probe(program), _sandbox.timeout_for(len(program))
        )
        facts = _program.check(result, manifest)
    else:
        facts = _program.check(record, manifest)
    # a record only saves the child: the custom calls are checked against JAX on every load
    _customcalls.check_calls(facts.custom_calls, _jaxcompat.allowed_custom_calls())
    if record is None:
        _checked.remember(digest, result)
    written_here = record is not None and record.get("written_here") is True
    _program.cross_check(facts, manifest)
    # The child read this exact program without crashing and approved every field, so
    # reading it here (deterministic) is safe.
    exported = jax.export.deserialize(bytearray(program))
    in_avals, out_avals = list(exported.in_avals), list(exported.out_avals)
    expected = manifest["weights"] + manifest["inputs"]["leaves"]
    if len(in_avals) != len(expected):
        raise FreezeError(
            f"program takes {len(in_avals)} arguments, the file describes {len(expected)}",
            code="NBC504",
        )
    for i, (aval, spec) in enumerate(zip(in_avals, expected, strict=True)):
        if _batch.dims(aval.shape) != spec["shape"] or np.dtype(aval.dtype).name != spec["dtype"]:
            what = (
                f"weight {spec['name']!r}"
                if "name" in spec
                else f"input {i - len(manifest['weights'])}"
            )
            raise FreezeError(
                f"{what} is {spec['dtype']}{spec['shape']} but the program expects "
                f"{np.dtype(aval.dtype).name}{_batch.show(map(str, aval.shape))}",
                code="NBC504",
            )
    outputs = manifest["outputs"]["leaves"]
    if [
        {"shape": _batch.dims(a.shape), "dtype": np.dtype(a.dtype).name} for a in out_avals
    ] != outputs:
        raise FreezeError("program outputs differ from the manifest's signature", code="NBC500")
    return exported, facts, written_here


def load(
    path: str | os.PathLike[str],
    *,
    platform: str | None = None,
    max_bytes: int | None = None,
) -> FrozenModel:
    """Check and load a `.nbc` file; FreezeError (NBC500-NBC509) if it is refused.

    ``platform`` picks one of the file's platforms; default: this machine's default backend,
    else the first of the file's platforms that is available. ``max_bytes`` is the memory
    budget (default: the memory available now): the file, the program's outputs and XLA's
    memory analysis of the compiled program must fit in it (docs/format.md).
    """
    budget = _budget.resolve(max_bytes)
    data = _format.read_file(path, budget)
    return load_bytes(data, platform=platform, path=os.fspath(path), max_bytes=budget)


def load_bytes(
    data: bytes | bytearray | memoryview,
    *,
    platform: str | None = None,
    path: str = "<bytes>",
    max_bytes: int | None = None,
) -> FrozenModel:
    """`load` from the file's bytes (the weights stay views into ``data``)."""
    budget = _budget.resolve(max_bytes)
    checked = check_file(data, platform, defer_weights=True)
    try:
        exported, facts, written_here = check_program(checked)
    finally:
        checked.sections.weights_checked()  # a digest mismatch outranks any later refusal
    return FrozenModel(checked, exported, facts, path, budget, written_here=written_here)
