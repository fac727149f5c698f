"""Export a traced model for a frozen file: hoist its constants, export it for the file's
platforms, strip machine paths, and check it with the loader's own program checks."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from nbcompile.errors import FreezeError
from nbcompile.frozen import (
    _customcalls,
    _jaxcompat,
    _locations,
    _manifest,
    _program,
    _safetensors,
)

#: Closed-over arrays larger than this are hoisted into the weight section (weights mode).
HOIST_BYTES = 1024


def as_numpy(leaf: Any, where: str) -> np.ndarray:
    """``leaf`` as a NumPy array; a typed PRNG key as its key data (uint32)."""
    if _manifest.key_impl(leaf) is not None:
        leaf = jax.random.key_data(leaf)
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


@dataclass(frozen=True)
class Built:
    exported: jax.export.Exported
    stored: list[tuple[str, np.ndarray]]
    hoisted: list[tuple[str, np.ndarray]]
    export_specs: list[jax.ShapeDtypeStruct]
    facts: _program.ProgramFacts
    #: the probe result ``load`` would compute (recorded as checked once written)
    record: dict[str, Any]


def build(
    program: Callable[..., tuple[Any, ...]],
    specs: list[jax.ShapeDtypeStruct],
    tensors: list[tuple[str, np.ndarray]],
    constants: bool,
    platforms: Sequence[str],
) -> Built:
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
        []
        if constants
        else [
            i
            for i, c in enumerate(consts)
            # a closed-over typed PRNG key stays in the program (it has no NumPy form)
            if _manifest.key_impl(c) is None and np.asarray(c).nbytes > HOIST_BYTES
        ]
    )
    taken = {nm for nm, _ in tensors}
    hoisted_tensors = []
    for k, i in enumerate(hoisted):
        nm = f"const_{k}"
        while nm in taken:
            nm = "_" + nm
        hoisted_tensors.append((nm, as_numpy(consts[i], nm)))

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
    facts, record = own_facts(exported)
    return Built(exported, stored, hoisted_tensors, export_specs, facts, record)


def own_facts(exported: jax.export.Exported) -> tuple[_program.ProgramFacts, dict[str, Any]]:
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


def concrete(specs: Sequence[jax.ShapeDtypeStruct], size: int) -> list[jax.ShapeDtypeStruct]:
    """``specs`` with every symbolic dimension (the batch) set to ``size``."""
    return [
        jax.ShapeDtypeStruct(
            tuple(size if jax.export.is_symbolic_dim(d) else d for d in s.shape), s.dtype
        )
        for s in specs
    ]


def compiled_ops(exported: jax.export.Exported, specs: Sequence[Any]) -> int | None:
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
