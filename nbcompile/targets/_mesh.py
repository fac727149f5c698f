"""Mesh and sharding specifications: ``--mesh 4x2:data,model`` and ``--shard x=data,None``.

``parse_mesh`` and ``parse_shard_specs`` turn the user's strings into shapes, axis names and
``PartitionSpec``s, raising :class:`~nbcompile.errors.TargetError` (NBC601) that quotes the bad
spec and shows a correct one. ``build_mesh`` lays a mesh over a list of devices with automatic
(``Auto``) axis types, since JAX 0.10's ``Explicit`` default rejects sharded contracting dims.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..errors import TargetError

__all__ = ["DEFAULT_AXIS_NAMES", "build_mesh", "parse_mesh", "parse_shard_specs"]

#: axis names used when ``--mesh`` gives only a shape
DEFAULT_AXIS_NAMES = ("data", "model", "stage", "expert")
_NAME = re.compile(r"^[A-Za-z_]\w*$")
_MESH_EXAMPLE = "--mesh 4x2 or --mesh 4x2:data,model"
_SHARD_EXAMPLE = "--shard x=data,None w=None,model (one entry per array dimension)"
_REPLICATED = {"", "none", "_", ".", "*"}


def _mesh_error(spec: object, why: str) -> TargetError:
    return TargetError(
        f"invalid mesh {spec!r}: {why}", code="NBC601", hint=f"write e.g. {_MESH_EXAMPLE}"
    )


def parse_mesh(spec: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """``"4x2"`` -> ``((4, 2), ("data", "model"))``; ``"2x2x2:a,b,c"`` names the axes."""
    if not isinstance(spec, str) or not spec.strip():
        raise _mesh_error(spec, "expected SHAPE[:NAMES]")
    shape_text, _, names_text = spec.strip().partition(":")
    parts = [p.strip() for p in shape_text.lower().split("x")]
    if not all(p.isdigit() for p in parts):
        raise _mesh_error(spec, "the shape must be positive integers joined by 'x'")
    shape = tuple(int(p) for p in parts)
    if any(n < 1 for n in shape):
        raise _mesh_error(spec, "every axis needs at least one device")
    if names_text.strip():
        names = tuple(n.strip() for n in names_text.split(","))
    elif len(shape) <= len(DEFAULT_AXIS_NAMES):
        names = DEFAULT_AXIS_NAMES[: len(shape)]
    else:
        raise _mesh_error(spec, f"more than {len(DEFAULT_AXIS_NAMES)} axes: name them")
    if len(names) != len(shape):
        raise _mesh_error(spec, f"{len(shape)} axes but {len(names)} names")
    bad = [n for n in names if not _NAME.match(n)]
    if bad:
        raise _mesh_error(spec, f"axis names must be identifiers, got {bad}")
    if len(set(names)) != len(names):
        raise _mesh_error(spec, "axis names must be distinct")
    return shape, names


def _shard_error(entry: str, why: str) -> TargetError:
    return TargetError(
        f"invalid sharding {entry!r}: {why}", code="NBC601", hint=f"write e.g. {_SHARD_EXAMPLE}"
    )


def _parse_partition(entry: str, text: str, axis_names: Sequence[str] | None) -> Any:
    from jax.sharding import PartitionSpec

    body = text.strip()
    if body.startswith("P(") and body.endswith(")"):
        body = body[2:-1]
    elif body[:1] in "([" and body[-1:] in ")]":
        body = body[1:-1]
    dims: list[Any] = []
    used: list[str] = []
    for raw in body.split(",") if body.strip() else []:
        item = raw.strip().strip("'\"")
        if item.lower() in _REPLICATED:
            dims.append(None)
            continue
        axes = tuple(a.strip().strip("'\"") for a in item.split("+"))
        for axis in axes:
            if not _NAME.match(axis):
                raise _shard_error(entry, f"{axis!r} is not an axis name")
            if axis_names is not None and axis not in axis_names:
                raise _shard_error(
                    entry, f"no mesh axis {axis!r} (the mesh has {list(axis_names)})"
                )
            if axis in used:
                raise _shard_error(entry, f"axis {axis!r} is used twice")
            used.append(axis)
        dims.append(axes[0] if len(axes) == 1 else axes)
    return PartitionSpec(*dims)


def parse_shard_specs(
    specs: Mapping[str, str] | Iterable[str] | None, axis_names: Sequence[str] | None = None
) -> dict[str, Any]:
    """``["x=data,None", "w=None,model"]`` (or a dict) -> ``{"x": P("data", None), ...}``.

    A dimension is an axis name, ``a+b`` for several axes, or ``None``/``_`` for replicated.
    ``ARG`` is a parameter name, a positional index, or a path into a pytree argument
    (``params.w1``, ``params.layers.0``). ``axis_names`` (the mesh's) are checked when given.
    """
    if specs is None:
        return {}
    items = (
        [(k, v, f"{k}={v}") for k, v in specs.items()]
        if isinstance(specs, Mapping)
        else [(*_split_entry(e), e) for e in specs]
    )
    parsed: dict[str, Any] = {}
    for arg, text, entry in items:
        arg = arg.strip()
        if not arg or not re.match(r"^[\w.\[\]'\"]+$", arg):
            raise _shard_error(entry, "expected ARG=SPEC with ARG an argument name or index")
        if not isinstance(text, str):
            raise _shard_error(entry, "the SPEC must be a string")
        if arg in parsed:
            raise _shard_error(entry, f"{arg!r} is given twice")
        parsed[arg] = _parse_partition(entry, text, axis_names)
    return parsed


def _split_entry(entry: str) -> tuple[str, str]:
    if not isinstance(entry, str) or "=" not in entry:
        raise _shard_error(str(entry), "expected ARG=SPEC")
    arg, _, text = entry.partition("=")
    return arg, text


def build_mesh(
    shape: tuple[int, ...], names: tuple[str, ...], devices: Sequence[Any], *, physical: bool
) -> Any:
    """A ``Mesh`` of the first ``prod(shape)`` devices with ``Auto`` axis types.

    ``physical`` asks JAX's ``mesh_utils`` for a layout that follows the TPU torus; it falls back
    to plain device order where that is not possible (e.g. a sub-mesh of a topology).
    """
    import numpy as np
    from jax.sharding import AxisType, Mesh

    needed = math.prod(shape)
    chosen = list(devices)[:needed]
    grid = None
    if physical:
        from jax.experimental import mesh_utils

        try:
            grid = mesh_utils.create_device_mesh(shape, chosen)
        except (ValueError, NotImplementedError, AssertionError):
            grid = None
    if grid is None:
        grid = np.array(chosen, dtype=object).reshape(shape)
    return Mesh(grid, names, axis_types=(AxisType.Auto,) * len(names))
