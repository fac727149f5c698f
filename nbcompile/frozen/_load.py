"""`load`: check a `.nbc` file completely, then deserialise it into a callable `FrozenModel`.

Checks run in this order, each refusal a FreezeError with a stable code: size bounds, magic,
version, header digest, section table, section digests (`_format`); manifest schema; weight
section layout (`_safetensors`); weights vs manifest; version window; platform and device
count; then the program is deserialised and its custom calls and argument types are checked.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from nbcompile.errors import FreezeError
from nbcompile.frozen import _batch, _format, _jaxcompat, _manifest, _safetensors, _sandbox

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


def _match_weights(manifest: dict[str, Any], tensors: list[_safetensors.TensorInfo]) -> None:
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


def check_file(data: bytes, platform: str | None = None) -> Checked:
    """Every check that needs no deserialisation (header, digests, layout, versions, platform)."""
    sections = _format.check_sections(data)
    manifest = _manifest.parse(sections.manifest, sections.format_version)
    tensors, data_start = _safetensors.parse(sections.weights)
    _match_weights(manifest, tensors)
    check_version_window(manifest["writer"])
    chosen = _pick_platform(manifest, platform)
    return Checked(manifest, tensors, data_start, sections, chosen)


def _deserialize(checked: Checked) -> jax.export.Exported:
    manifest = checked.manifest
    program = checked.sections.program
    if len(program) < 8:
        raise FreezeError("program section is empty or truncated", code="NBC500")

    def parse() -> dict[str, Any]:
        _, found = _jaxcompat.program_stats(jax.export.deserialize(bytearray(program)))
        return {"targets": found}

    # Large (constants-mode) programs take longer to read: one extra second per 10 MB.
    parsed = _sandbox.run_isolated(parse, _sandbox.PARSE_TIMEOUT_S + len(program) / 10e6)
    try:
        if "error" in parsed:
            raise ValueError(parsed["error"])
        targets = [str(t) for t in parsed["targets"]]
        exported = jax.export.deserialize(bytearray(program))
        platforms = tuple(exported.platforms)
        in_avals, out_avals = list(exported.in_avals), list(exported.out_avals)
        nr_devices = int(exported.nr_devices)
    except Exception as err:  # the flatbuffer / MLIR readers raise many kinds
        raise FreezeError(
            f"program section is not a readable jax.export artifact ({type(err).__name__}: "
            f"{str(err)[:200]})",
            code="NBC500",
        ) from None
    if platforms != tuple(manifest["platforms"]) or nr_devices != manifest["device_count"]:
        raise FreezeError("program platforms/devices differ from the manifest", code="NBC500")
    allowed = _jaxcompat.allowed_custom_calls()
    for target in targets:
        if target not in allowed:
            raise FreezeError(
                f"program calls custom call {target!r}, which is not on the allowlist",
                code="NBC505",
                hint="only JAX's export-stable custom calls are accepted in frozen models",
            )
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
    return exported


class FrozenModel:
    """A loaded `.nbc` model: call it on the non-weight inputs (same structure as when frozen)."""

    def __init__(self, checked: Checked, exported: jax.export.Exported, path: str) -> None:
        manifest = checked.manifest
        self.signature: dict[str, Any] = {
            "inputs": manifest["inputs"],
            "outputs": manifest["outputs"],
        }
        #: weight name -> shape, in program order
        self.weights: dict[str, tuple[int, ...]] = {
            w["name"]: tuple(w["shape"]) for w in manifest["weights"]
        }
        self.metadata: dict[str, Any] = {
            key: manifest[key]
            for key in (
                "name",
                "created_utc",
                "writer",
                "platforms",
                "device_count",
                "constants_mode",
                "program",
            )
        }
        self.metadata.update(
            path=path,
            format_version=checked.sections.format_version,
            file_bytes=checked.sections.file_bytes,
            platform=checked.platform,
        )
        self.platform = checked.platform
        self.exported = exported
        self._device = _jaxcompat.devices_for(checked.platform)[0]
        views = _safetensors.arrays(checked.sections.weights, checked.tensors, checked.data_start)
        self._weights = [
            jax.device_put(views[w["name"]], self._device) for w in manifest["weights"]
        ]
        self._call = jax.jit(exported.call)

    def __repr__(self) -> str:
        return (
            f"FrozenModel({self.metadata['name']!r}, platform={self.platform!r}, "
            f"weights={len(self.weights)}, path={self.metadata['path']!r})"
        )

    def _inputs(self, inputs: tuple[Any, ...]) -> list[Any]:
        spec = self.signature["inputs"]
        leaves = _manifest.flatten(spec["tree"], inputs, "inputs")
        out, batch = [], None  # batch: (size, leaf index) of the first leaf that set b
        for i, (leaf, want) in enumerate(zip(leaves, spec["leaves"], strict=True)):
            value = leaf if isinstance(leaf, jax.Array) else np.asarray(leaf)
            shape, dtype = tuple(value.shape), np.dtype(value.dtype).name
            takes = f"{want['dtype']}{_batch.show(want['shape'])}"
            uses_b = bool(want["shape"]) and want["shape"][0] == _batch.BATCH_DIM
            size = shape[0] if uses_b and shape else 1
            if (
                dtype != want["dtype"]
                or size < 1
                or shape != _batch.concrete_shape(want["shape"], size)
            ):
                hint_shape = _batch.show(want["shape"]) if uses_b else str(tuple(want["shape"]))
                raise FreezeError(
                    f"input leaf {i} is {dtype}{list(shape)}, the model takes {takes}"
                    + (" (b: any batch size >= 1)" if uses_b else ""),
                    code="NBC507",
                    hint=f"pass an array of shape {hint_shape} and dtype {want['dtype']}",
                )
            if uses_b:
                if batch is None:
                    batch = (size, i)
                elif size != batch[0]:
                    raise FreezeError(
                        f"input leaf {i} has batch size b={size}, but input leaf {batch[1]} "
                        f"has b={batch[0]}: every leaf with dimension b must have the same size",
                        code="NBC507",
                    )
            out.append(jax.device_put(value, self._device))
        return out

    def __call__(self, *inputs: Any) -> Any:
        leaves = self._inputs(inputs)
        custom_calls = self.metadata["program"].get("custom_calls") or []
        with jax.default_device(self._device), _jaxcompat.lapack_not_needed(custom_calls):
            outs = self._call(*self._weights, *leaves)
        return _manifest.unflatten(self.signature["outputs"]["tree"], list(outs))


def load(path: str | os.PathLike[str], *, platform: str | None = None) -> FrozenModel:
    """Check and load a `.nbc` file; FreezeError (NBC500-NBC505) if it is refused.

    ``platform`` picks one of the file's platforms; default: this machine's default backend,
    else the first of the file's platforms that is available.
    """
    return load_bytes(_format.read_file(path), platform=platform, path=os.fspath(path))


def load_bytes(data: bytes, *, platform: str | None = None, path: str = "<bytes>") -> FrozenModel:
    """`load` from the file's bytes (the weights stay views into ``data``)."""
    checked = check_file(data, platform)
    exported = _deserialize(checked)
    return FrozenModel(checked, exported, path)
