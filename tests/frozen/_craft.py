"""Helpers that build hostile or edited `.nbc` files from a valid one (valid digests unless
the point is a bad digest), so each loader check can be reached on purpose."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

from nbcompile.frozen import _format


def split(data: bytes) -> tuple[bytes, bytes, bytes]:
    return _format.unpack_unchecked(data)


def repack(
    data: bytes,
    *,
    manifest: bytes | None = None,
    weights: bytes | None = None,
    program: bytes | None = None,
    version: int = _format.FORMAT_VERSION,
) -> bytes:
    m, w, p = split(data)
    return _format.pack(
        m.rstrip(b" ") if manifest is None else manifest,
        w if weights is None else weights,
        p if program is None else program,
        format_version=version,
    )


def edit_manifest(data: bytes, edit: Callable[[dict[str, Any]], None]) -> bytes:
    manifest = json.loads(split(data)[0])
    edit(manifest)
    return repack(data, manifest=json.dumps(manifest).encode())


def weights_raw(header: bytes | str, buffer: bytes, length: int | None = None) -> bytes:
    """A weight section from a literal JSON header (str/bytes) and a data buffer."""
    head = header.encode() if isinstance(header, str) else header
    n = len(head) if length is None else length
    return struct.pack("<Q", n) + head + buffer


def weights_json(entries: dict[str, Any], buffer: bytes) -> bytes:
    return weights_raw(json.dumps(entries), buffer)


def flip(data: bytes, offset: int) -> bytes:
    out = bytearray(data)
    out[offset] ^= 0x40
    return bytes(out)


def section_offset(data: bytes, index: int) -> tuple[int, int]:
    """(offset, length) of section ``index`` (0 manifest, 1 weights, 2 program)."""
    _, _, off, length, _ = struct.unpack_from("<4sIQQ32s", data, 24 + 56 * index)
    return off, length


# ---------------------------------------------------------------- programs written by hand
def module_bytes(text: str) -> bytes:
    """A StableHLO portable artifact from module text (how jax.export stores programs)."""
    from jax._src.lib.mlir import ir

    from nbcompile.frozen import _jaxcompat

    with _jaxcompat.single_threaded_context():
        return _jaxcompat.serialize_module(ir.Module.parse(text))


def exported_with(base: Any, text: str, **fields: Any) -> Any:
    """``base`` (a jax.export.Exported) with its program replaced by ``text``."""
    import dataclasses

    return dataclasses.replace(base, mlir_module_serialized=module_bytes(text), **fields)


def program_file(
    text: str,
    inputs: list[Any],
    outputs: list[Any],
    *,
    manifest_program: dict[str, Any] | None = None,
    vjp_order: int = 0,
    base_fn: Callable[..., Any] | None = None,
) -> bytes:
    """A complete, self-consistent `.nbc` (cpu only, no weights) whose program is ``text``.

    ``inputs``/``outputs`` are ``jax.ShapeDtypeStruct``s of main's arguments and results. The
    manifest lists what the program really holds (op count, custom calls) unless
    ``manifest_program`` says otherwise: a hostile writer makes its file consistent.
    """
    import tempfile

    import jax
    import jax.numpy as jnp
    import numpy as np

    from nbcompile.frozen import _jaxcompat, freeze

    def zeros(*xs: Any) -> tuple[Any, ...]:
        return tuple(jnp.zeros(o.shape, o.dtype) + 0 * jnp.sum(xs[0]) for o in outputs)

    fn = base_fn or zeros
    example = [np.zeros(a.shape, a.dtype) for a in inputs]
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/base.nbc"
        freeze(
            fn,
            *example,
            path=path,
            platforms=("cpu",),
            weights_argnums=(),
            batch="static",
            measure_compiled=False,
        )
        with open(path, "rb") as f:
            base_file = f.read()
    base = jax.export.export(jax.jit(fn), platforms=["cpu"])(*inputs)
    exported = exported_with(base, text)
    program = bytes(exported.serialize(vjp_order=vjp_order))
    if manifest_program is None:
        ops, targets = _jaxcompat.program_stats(exported)  # counts what the limits refuse
        manifest_program = {"stablehlo_ops": ops, "custom_calls": sorted(set(targets))}
    data = repack(base_file, program=program)
    return edit_manifest(data, lambda m: m.update(program=manifest_program))
