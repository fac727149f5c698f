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
    _customcalls,
    _format,
    _jaxcompat,
    _locations,
    _manifest,
    _program,
    _safetensors,
)
from nbcompile.units import format_bytes

#: Closed-over arrays larger than this are hoisted into the weight section (weights mode).
HOIST_BYTES = 1024


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

    @property
    def ops_removed(self) -> int | None:
        """Training-graph ops minus program ops, when the training graph's count is known."""
        return None if self.reference_ops is None else self.reference_ops - self.program_ops

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["platforms"] = list(self.platforms)
        data["custom_calls"] = list(self.custom_calls)
        data["ops_removed"] = self.ops_removed
        return data

    def text(self) -> str:
        mode = "constants baked in" if self.constants_mode else "weights as arguments"
        overhead = self.file_bytes - self.weight_bytes
        lines = [
            f"frozen {self.name!r} -> {self.path}",
            f"  file {format_bytes(self.file_bytes)}, weights {format_bytes(self.weight_bytes)} "
            f"in {self.n_weights} tensors ({self.n_hoisted} hoisted constants), "
            f"overhead {format_bytes(overhead)}",
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
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()


def _as_numpy(leaf: Any, where: str) -> np.ndarray:
    try:
        arr = np.asarray(jax.device_get(leaf)) if isinstance(leaf, jax.Array) else None
        if arr is None:
            arr = np.asarray(jax.numpy.asarray(leaf))
    except (TypeError, ValueError) as err:
        raise FreezeError(
            f"{where} is not an array ({type(leaf).__name__})", code="NBC506"
        ) from err
    _safetensors.dtype_code(arr.dtype)
    return arr


def _weights(fn: Callable[..., Any], args: Sequence[Any], argnums: Sequence[int]):
    names = param_names(fn, len(args))
    tensors, treedefs = [], {}
    for i in argnums:
        pairs, treedefs[i] = jax.tree_util.tree_flatten_with_path(args[i])
        for path, leaf in pairs:
            name = names[i] + jax.tree_util.keystr(path)
            tensors.append((name, _as_numpy(leaf, name)))
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
    input_leaves = [
        _as_numpy(x, f"input {i}")
        for i, x in enumerate(_manifest.flatten(input_tree, input_args, "inputs"))
    ]
    weight_specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for _, a in tensors]
    n_weights = len(tensors)
    out_tree: dict[str, Any] = {}

    def program(*flat: Any) -> tuple[Any, ...]:
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
        return tuple(_manifest.flatten(out_tree, out, "output"))

    def build(marks: Sequence[bool], size: Any) -> _Built:
        specs = weight_specs + _batch.input_specs(input_leaves, marks, size)
        return _build(program, specs, tensors, constants, platforms)

    marks = _batch.batched(input_leaves) if batch == "auto" else [False] * len(input_leaves)
    built = None
    if any(marks):
        try:
            built = build(marks, _batch.symbol())
            out_dims = [_batch.dims(a.shape) for a in built.exported.out_avals]
            if None in out_dims:
                raise ValueError("an output shape is not expressible with b alone")
            for size in _batch.PROBE_SIZES:
                _jaxcompat.check_refines(built.exported, _concrete(built.export_specs, size))
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
                _manifest.array_spec(a.shape, a.dtype, batched=mark)
                for a, mark in zip(input_leaves, marks, strict=True)
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
        "weights": [{"name": nm, **_manifest.array_spec(a.shape, a.dtype)} for nm, a in stored],
        "program": {"stablehlo_ops": ops, "custom_calls": list(targets)},
    }
    file_bytes = _atomic.write_atomic(
        path, _manifest.encode(manifest), lambda: _safetensors.chunks(stored), program_bytes
    )
    # freeze ran every program check on exactly these bytes: loading them need not probe again
    _checked.remember(hashlib.sha256(program_bytes).digest(), built.record)
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
        compiled_ops=_compiled_ops(exported, _concrete(export_specs, example_size))
        if measure_compiled
        else None,
        reference_ops=reference_ops,
        custom_calls=tuple(targets),
        batch="symbolic" if any(marks) else "static",
    )


@dataclass(frozen=True)
class _Built:
    exported: jax.export.Exported
    stored: list[tuple[str, np.ndarray]]
    hoisted: list[tuple[str, np.ndarray]]
    export_specs: list[jax.ShapeDtypeStruct]
    facts: _program.ProgramFacts
    #: the probe result ``load`` would compute (recorded as checked once written)
    record: dict[str, Any]


def _build(
    program: Callable[..., tuple[Any, ...]],
    specs: list[jax.ShapeDtypeStruct],
    tensors: list[tuple[str, np.ndarray]],
    constants: bool,
    platforms: Sequence[str],
) -> _Built:
    """Trace ``program`` at ``specs`` (weights then inputs), hoist its constants, export it."""
    n_weights = len(tensors)
    try:
        traced = jax.make_jaxpr(program)(*specs)
        closed = jax.make_jaxpr(lambda *a: _jaxcompat.inline_eval(traced.jaxpr, traced.consts, *a))(
            *specs
        )
    except FreezeError:
        raise
    except Exception as err:
        raise FreezeError(f"tracing the model failed: {err}", code="NBC506") from err
    consts = list(closed.consts)
    hoisted = (
        [] if constants else [i for i, c in enumerate(consts) if np.asarray(c).nbytes > HOIST_BYTES]
    )
    taken = {nm for nm, _ in tensors}
    hoisted_tensors = []
    for k, i in enumerate(hoisted):
        nm = f"const_{k}"
        while nm in taken:
            nm = "_" + nm
        hoisted_tensors.append((nm, _as_numpy(consts[i], nm)))

    if constants:
        weight_values = [a for _, a in tensors]

        def exported_fn(*inputs: Any) -> tuple[Any, ...]:
            return tuple(_jaxcompat.inline_eval(closed.jaxpr, consts, *weight_values, *inputs))

        stored, export_specs = [], specs[n_weights:]
    else:

        def exported_fn(*args: Any) -> tuple[Any, ...]:
            values = list(consts)
            for k, i in enumerate(hoisted):
                values[i] = args[k]
            return tuple(_jaxcompat.inline_eval(closed.jaxpr, values, *args[len(hoisted) :]))

        stored = hoisted_tensors + tensors
        export_specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for _, a in hoisted_tensors] + specs
    try:
        exported = jax.export.export(jax.jit(exported_fn), platforms=list(platforms))(*export_specs)
    except FreezeError:
        raise
    except Exception as err:
        raise FreezeError(f"exporting the program failed: {err}", code="NBC506") from err
    exported = _locations.strip_exported(exported)
    facts, record = _own_facts(exported)
    return _Built(exported, stored, hoisted_tensors, export_specs, facts, record)


def _own_facts(exported: jax.export.Exported) -> tuple[_program.ProgramFacts, dict[str, Any]]:
    """The facts ``load`` will read from this program, checked by the same rules now, so that
    ``freeze`` never writes a file ``load`` refuses (a refusal here is NBC506)."""
    try:
        as_loaded = jax.export.deserialize(exported.serialize())  # what load will read
        result = {**_program.exported_facts(as_loaded)}
        result.update(_program.module_facts(as_loaded.mlir_module_serialized))
    except _program.Refused as refused:
        raise FreezeError(
            f"the exported program cannot be frozen: {refused}", code="NBC506"
        ) from None
    facts = _program.ProgramFacts(
        ops=result["ops"],
        chain=result["chain"],
        nesting=result["nesting"],
        custom_calls=result["custom_calls"],
    )
    try:
        _customcalls.check_calls(facts.custom_calls, _jaxcompat.allowed_custom_calls())
    except FreezeError as err:
        raise FreezeError(
            f"the program cannot be frozen: {err.message}",
            code="NBC506",
            hint="freeze for fewer platforms (platforms=('cpu',)) or avoid that operation",
        ) from None
    return facts, result


def _concrete(specs: Sequence[jax.ShapeDtypeStruct], size: int) -> list[jax.ShapeDtypeStruct]:
    """``specs`` with every symbolic dimension (the batch) set to ``size``."""
    return [
        jax.ShapeDtypeStruct(
            tuple(size if jax.export.is_symbolic_dim(d) else d for d in s.shape), s.dtype
        )
        for s in specs
    ]


def _compiled_ops(exported: jax.export.Exported, specs: Sequence[Any]) -> int | None:
    """Top-level instructions after XLA optimisation on the local backend, if it is a target."""
    from ..analysis.hlo import parse_hlo  # the one HLO text reader (freeze time only)

    local = _jaxcompat.export_platform(jax.devices()[0])
    if local not in exported.platforms:
        return None
    try:
        compiled = jax.jit(exported.call).lower(*specs).compile()
        entry = parse_hlo(compiled.as_text()).entry_computation
        return len(entry.instructions) if entry is not None else None
    except Exception:  # a statistic only: never fail a freeze over it
        return None
