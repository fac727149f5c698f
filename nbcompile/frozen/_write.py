"""`freeze`: trace a model, hoist its weights out of the program, write one `.nbc` file."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

import jax
import numpy as np

from nbcompile.capture.names import param_names
from nbcompile.errors import FreezeError
from nbcompile.frozen import (
    _atomic,
    _batch,
    _checked,
    _export,
    _format,
    _jaxcompat,
    _manifest,
    _safetensors,
)
from nbcompile.units import format_bytes


@dataclass(frozen=True)
class FreezeResult:
    """What freezing did: sizes, op counts, platforms and the input/output signature."""

    path: str
    file_bytes: int
    weight_bytes: int
    n_weights: int
    program_ops: int
    constants_mode: bool
    platforms: tuple[str, ...]
    signature: dict[str, Any]
    name: str = "model"
    n_hoisted: int = 0
    hoisted_bytes: int = 0
    compiled_ops: int | None = None
    reference_ops: int | None = None
    custom_calls: tuple[str, ...] = field(default_factory=tuple)
    #: "symbolic": the inputs' leading dimension is the symbolic batch ``b`` (any size);
    #: "static": the model takes exactly the example's shapes.
    batch: str = "static"
    #: what the writer should know about the program it froze (e.g. a model in training mode)
    notes: tuple[str, ...] = ()

    @property
    def ops_removed(self) -> int | None:
        """Training-graph ops minus program ops, when the training graph's count is known."""
        return None if self.reference_ops is None else self.reference_ops - self.program_ops

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["platforms"] = list(self.platforms)
        data["custom_calls"] = list(self.custom_calls)
        data["notes"] = list(self.notes)
        data["ops_removed"] = self.ops_removed
        return data

    def text(self) -> str:
        mode = "constants baked in" if self.constants_mode else "weights as arguments"
        overhead = self.file_bytes - self.weight_bytes
        where = (
            "baked into the program (no weight section)"
            if self.constants_mode
            else f"in the weight section ({self.n_hoisted} hoisted constants)"
        )
        lines = [
            f"frozen {self.name!r} -> {self.path}",
            f"  file {format_bytes(self.file_bytes)}, weights {format_bytes(self.weight_bytes)} "
            f"in {self.n_weights} tensors {where}, overhead {format_bytes(overhead)}",
            f"  program: {self.program_ops} StableHLO ops, {mode}, "
            f"platforms {', '.join(self.platforms)}",
            "  batch: symbolic (any batch size b)"
            if self.batch == "symbolic"
            else "  batch: static (exactly the example's shapes)",
        ]
        if self.compiled_ops is not None:
            lines.append(f"  compiled here: {self.compiled_ops} top-level HLO instructions")
        if self.reference_ops is not None:
            lines.append(
                f"  training graph: {self.reference_ops} ops ({self.ops_removed} removed by freezing)"
            )
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()


def _weights(fn: Callable[..., Any], args: Sequence[Any], argnums: Sequence[int]):
    names = param_names(fn, len(args))
    tensors, treedefs = [], {}
    for i in argnums:
        pairs, treedefs[i] = jax.tree_util.tree_flatten_with_path(args[i])
        for path, leaf in pairs:
            name = names[i] + jax.tree_util.keystr(path)
            tensors.append((name, _export.as_numpy(leaf, name)))
    return tensors, treedefs


def _versions() -> dict[str, Any]:
    try:
        own = importlib_metadata.version("nbcompile")
    except importlib_metadata.PackageNotFoundError:
        own = "0+unknown"
    import jaxlib

    return {
        "nbcompile": own,
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "python": ".".join(map(str, sys.version_info[:3])),
        "export_serialization_version": _jaxcompat.serialization_version() or 0,
        "calling_convention_version": _jaxcompat.calling_convention_range()[1],
    }


def freeze(
    fn: Callable[..., Any],
    *example_args: Any,
    path: str | Path = "model.nbc",
    platforms: Sequence[str] = ("cpu", "cuda", "tpu"),
    weights_argnums: Sequence[int] | int | None = None,
    constants: bool = False,
    name: str | None = None,
    reference_ops: int | None = None,
    measure_compiled: bool = True,
    batch: str = "auto",
) -> FreezeResult:
    """Freeze ``fn`` at ``example_args`` into the single file ``path`` (see docs/format.md).

    ``weights_argnums`` picks the arguments stored as weights (default: every argument except
    the last, so ``predict(params, x)`` stores ``params``); the loaded model is called on the
    others. ``constants=True`` bakes the weights into the program instead. ``reference_ops``
    (the training graph's op count, when known) is reported against the program's.
    ``batch="auto"`` exports the inputs' leading dimension as the symbolic batch ``b`` (every
    input leaf whose leading dimension equals the first leaf's), so the file serves any batch
    size; when the model cannot be exported that way it silently falls back to the example's
    static shapes (``FreezeResult.batch`` says which). ``batch="static"`` always uses them.
    """
    if batch not in ("auto", "static"):
        raise FreezeError(f"batch must be 'auto' or 'static', got {batch!r}", code="NBC506")
    platforms = tuple(dict.fromkeys("cuda" if p == "gpu" else p for p in platforms))
    if not platforms or any(p not in _manifest.PLATFORMS for p in platforms):
        raise FreezeError(
            f"platforms must be among {_manifest.PLATFORMS}, got {platforms!r}", code="NBC506"
        )
    _atomic.check_target(path)
    n = len(example_args)
    argnums = (
        tuple(range(n - 1))
        if weights_argnums is None
        else (weights_argnums,)
        if isinstance(weights_argnums, int)
        else tuple(weights_argnums)
    )
    if any(not -n <= i < n for i in argnums):
        raise FreezeError(
            f"weights_argnums {argnums} out of range for {n} arguments", code="NBC506"
        )
    argnums = tuple(sorted({i % n for i in argnums}))
    tensors, treedefs = _weights(fn, example_args, argnums)
    input_args = tuple(a for i, a in enumerate(example_args) if i not in argnums)
    input_tree = _manifest.tree_of(input_args, "inputs")
    flat_inputs = _manifest.flatten(input_tree, input_args, "inputs")
    input_leaves = [_export.as_numpy(x, f"input {i}") for i, x in enumerate(flat_inputs)]
    # typed PRNG keys are stored as their key data; the program wraps them again
    weight_impls = [
        _manifest.key_impl(x) for i in argnums for x in jax.tree_util.tree_leaves(example_args[i])
    ]
    input_impls = [_manifest.key_impl(x) for x in flat_inputs]
    key_weights = {nm: impl for (nm, _), impl in zip(tensors, weight_impls, strict=True) if impl}
    weight_specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for _, a in tensors]
    n_weights = len(tensors)
    out_tree: dict[str, Any] = {}

    def program(*flat: Any) -> tuple[Any, ...]:
        flat = tuple(_manifest.wrap_keys(flat, weight_impls + input_impls))
        args, pos = list(example_args), 0
        for i in argnums:
            count = treedefs[i].num_leaves
            args[i] = jax.tree_util.tree_unflatten(treedefs[i], flat[pos : pos + count])
            pos += count
        inputs = _manifest.unflatten(input_tree, flat[n_weights:])
        for i, value in zip([i for i in range(n) if i not in argnums], inputs, strict=True):
            args[i] = value
        out = fn(*args)
        out_tree.clear()
        out_tree.update(_manifest.tree_of(out, "output"))
        leaves = _manifest.flatten(out_tree, out, "output")
        _manifest.refuse_keys(leaves, "output")
        return tuple(leaves)

    def build(marks: Sequence[bool], size: Any) -> _export.Built:
        specs = weight_specs + _batch.input_specs(input_leaves, marks, size)
        return _export.build(program, specs, tensors, constants, platforms)

    marks = (
        _batch.batched(_manifest.key_shapes(input_leaves, input_impls))
        if batch == "auto"
        else [False] * len(input_leaves)
    )
    built = None
    if any(marks):
        try:
            built = build(marks, _batch.symbol())
            out_dims = [_batch.dims(a.shape) for a in built.exported.out_avals]
            if None in out_dims:
                raise ValueError("an output shape is not expressible with b alone")
            for size in _batch.PROBE_SIZES:
                _jaxcompat.check_refines(built.exported, _export.concrete(built.export_specs, size))
        except Exception:  # not expressible with a symbolic batch: export the example's shapes
            built = None
    if built is None:
        marks = [False] * len(input_leaves)
        built = build(marks, None)
        out_dims = [_batch.dims(a.shape) for a in built.exported.out_avals]
    exported, stored, export_specs = built.exported, built.stored, built.export_specs
    hoisted_tensors, facts = built.hoisted, built.facts
    ops, targets = facts.ops, facts.targets
    example_size = input_leaves[0].shape[0] if any(marks) else 0
    try:
        program_bytes = bytes(exported.serialize())
    except Exception as err:
        raise FreezeError(f"exporting the program failed: {err}", code="NBC506") from err
    name = name or getattr(fn, "__name__", None) or type(fn).__name__
    signature = {
        "inputs": {
            "tree": input_tree,
            "leaves": [
                _manifest.array_spec(a.shape, a.dtype, batched=mark, prng_impl=impl)
                for a, mark, impl in zip(input_leaves, marks, input_impls, strict=True)
            ],
        },
        "outputs": {
            "tree": dict(out_tree),
            "leaves": [
                {"shape": d, "dtype": np.dtype(a.dtype).name}
                for d, a in zip(out_dims, exported.out_avals, strict=True)
            ],
        },
    }
    manifest = {
        "format": _manifest.SCHEMA,
        "format_version": _format.FORMAT_VERSION,
        "name": str(name)[:200],
        "created_utc": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "writer": _versions(),
        "platforms": list(platforms),
        "device_count": int(exported.nr_devices),
        "constants_mode": bool(constants),
        **signature,
        "weights": [
            {"name": nm, **_manifest.array_spec(a.shape, a.dtype, prng_impl=key_weights.get(nm))}
            for nm, a in stored
        ],
        "program": {"stablehlo_ops": ops, "custom_calls": list(targets)},
    }
    file_bytes = _atomic.write_atomic(
        path, _manifest.encode(manifest), lambda: _safetensors.chunks(stored), program_bytes
    )
    # freeze ran every program check on exactly these bytes: loading them need not probe again
    _checked.remember(hashlib.sha256(program_bytes).digest(), built.record, written_here=True)
    return FreezeResult(
        path=str(path),
        file_bytes=file_bytes,
        weight_bytes=sum(a.nbytes for _, a in stored)
        if not constants
        else sum(a.nbytes for _, a in tensors),
        n_weights=len(stored) if not constants else len(tensors),
        program_ops=ops,
        constants_mode=bool(constants),
        platforms=platforms,
        signature=json.loads(json.dumps(signature)),
        name=manifest["name"],
        n_hoisted=len(hoisted_tensors),
        hoisted_bytes=sum(a.nbytes for _, a in hoisted_tensors),
        compiled_ops=_export.compiled_ops(exported, _export.concrete(export_specs, example_size))
        if measure_compiled
        else None,
        reference_ops=reference_ops,
        custom_calls=tuple(targets),
        batch="symbolic" if any(marks) else "static",
    )
