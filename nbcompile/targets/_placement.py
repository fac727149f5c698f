"""Place example arguments on a :class:`Target`: real arrays here, abstract ones elsewhere.

The one compile path (``nbcompile.stages``) traces ``jax.jit(fn)`` on *placed* arguments:

- present target, no mesh: the user's arrays as they are (shardings they carry are kept);
- a mesh (``--mesh``/``--shard``), or a device that is not here: ``jax.ShapeDtypeStruct``s with
  a ``NamedSharding`` over the target's mesh (from ``--shard`` specs, else the sharding the
  argument already carries, else replicated) or a ``SingleDeviceSharding`` on the target's
  first device — so nothing is copied and absent devices can be compiled for;
- lowered-only targets: ``ShapeDtypeStruct``s with no sharding.

Keyword arguments are placed like positional ones and stay program *inputs*.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..errors import TargetError
from ._collectives import collectives
from ._resolve import Target

__all__ = ["Placement", "abstract_leaf", "output_shardings", "place_args", "program_collectives"]


@dataclass
class Placement:
    """Arguments placed on a target, and how (for the view).

    ``input_shardings`` maps argument paths (``x``, ``params.w1``) to their ``PartitionSpec``
    text; ``per_device_shapes`` maps paths (inputs and, after compiling, ``output[0]``...) to
    ``(global shape, per-device shape)``.
    """

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    input_shardings: dict[str, str] = field(default_factory=dict)
    per_device_shapes: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = field(
        default_factory=dict
    )


def _path_text(root: str, path: tuple[Any, ...]) -> str:
    parts = [root]
    for key in path:
        for attr in ("key", "name", "idx"):
            if hasattr(key, attr):
                parts.append(str(getattr(key, attr)))
                break
        else:
            parts.append(str(key))
    return ".".join(parts)


def _spec_for(path: str, specs: dict[str, Any], used: set[str]) -> Any | None:
    """The spec of the longest ``specs`` key that is ``path`` or a prefix of it."""
    best = None
    for key in specs:
        if (path == key or path.startswith(key + ".")) and (best is None or len(key) > len(best)):
            best = key
    if best is None:
        return None
    used.add(best)
    return specs[best]


def spec_text(spec: Any) -> str:
    """``PartitionSpec('data', None)`` -> ``data,None`` (the ``--shard`` syntax)."""
    return ",".join("None" if a is None else a if isinstance(a, str) else "+".join(a) for a in spec)


def _check_divisible(path: str, shape: tuple[int, ...], spec: Any, mesh: Any) -> None:
    if len(spec) > len(shape):
        raise TargetError(
            f"--shard {path}={spec_text(spec)} has {len(spec)} entries but {path} has "
            f"{len(shape)} dimensions {shape}",
            code="NBC601",
            hint=f"give at most one entry per dimension, e.g. {path}={','.join(['None'] * len(shape))}",
        )
    for dim, axes in zip(shape, spec, strict=False):
        if axes is None:
            continue
        axes = (axes,) if isinstance(axes, str) else tuple(axes)
        missing = [a for a in axes if a not in mesh.shape]
        if missing:
            raise TargetError(
                f"{path} is sharded over mesh axis {missing[0]!r}, which the target mesh "
                f"{dict(mesh.shape)} does not have",
                code="NBC601",
                hint="name the mesh axes as the arguments' shardings do, e.g. --mesh 4x2:x,y",
            )
        size = math.prod(mesh.shape[a] for a in axes)
        if dim % size:
            raise TargetError(
                f"--shard {path}={spec_text(spec)}: a dimension of size {dim} cannot be split "
                f"over {'+'.join(axes)} ({size} devices)",
                code="NBC601",
                hint="shard a dimension divisible by the mesh axis size, or change --mesh",
            )


def _own_sharding(leaf: Any, mesh: Any) -> Any | None:
    """The ``NamedSharding`` a placed array already carries over a mesh of ``mesh``'s shape
    (the user's own sharding, to keep), else None."""
    from jax.sharding import NamedSharding

    sharding = getattr(leaf, "sharding", None)
    if not isinstance(sharding, NamedSharding):
        return None
    same = dict(sharding.mesh.shape) == dict(mesh.shape)
    return sharding if same else None


def _same_spec(a: Any, b: Any) -> bool:
    """Two ``PartitionSpec``s place an array alike (trailing ``None`` entries mean nothing)."""

    def norm(spec: Any) -> tuple[Any, ...]:
        entries = [e if e is None or isinstance(e, str) else tuple(e) for e in spec]
        entries = [e[0] if isinstance(e, tuple) and len(e) == 1 else e for e in entries]
        while entries and entries[-1] is None:
            entries.pop()
        return tuple(entries)

    return norm(a) == norm(b)


def _mesh_like(mesh: Any, other: Any) -> Any:
    """``mesh``'s devices with ``other``'s axis types (JAX 0.10 meshes default to Explicit
    axes, which a function written for them — ``shard_map`` — needs to see)."""
    from jax.sharding import Mesh

    if tuple(mesh.axis_types) == tuple(other.axis_types):
        return mesh
    return Mesh(mesh.devices, mesh.axis_names, axis_types=other.axis_types)


def abstract_leaf(leaf: Any, sharding: Any = None) -> Any:
    """``jax.ShapeDtypeStruct`` of an array leaf (weak type kept); other leaves as they are.

    The dtype is the one JAX gives such a value (a NumPy float64 array is float32 without
    ``jax_enable_x64``): JAX 0.12 warns when a ShapeDtypeStruct asks for a dtype it would
    truncate, and a warning the user's settings make an error must not fail the compile."""
    import jax

    if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
        return leaf
    weak = bool(getattr(leaf, "weak_type", False))
    dtype = jax.dtypes.canonicalize_dtype(leaf.dtype, allow_extended_dtype=True)
    return jax.ShapeDtypeStruct(tuple(leaf.shape), dtype, sharding=sharding, weak_type=weak)


def place_args(
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    target: Target,
    *,
    names: list[str],
    static: set[int],
    static_names: set[str] = frozenset(),  # type: ignore[assignment]
    specs: dict[str, Any] | None = None,
) -> Placement:
    """Place ``args``/``kwargs`` for a compile on ``target`` (see the module docstring).

    ``names`` are the user's names of the positional arguments (for ``--shard`` and messages);
    ``static`` / ``static_names`` are left untouched. Raises ``TargetError`` (NBC601) for a
    ``--shard`` naming no array argument, or a spec that does not fit.
    """
    import jax
    from jax.sharding import NamedSharding, PartitionSpec, make_single_device_sharding

    specs = dict(specs or {})
    if specs and target.mesh is None:
        raise TargetError("--shard needs --mesh", code="NBC601", hint="add e.g. --mesh 4x2")
    mesh = target.mesh
    placement = Placement(args=(), kwargs={})
    used: set[str] = set()
    abstract = mesh is not None or not target.present

    def place(root: str, path: tuple[Any, ...], leaf: Any) -> Any:
        if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
            return leaf
        shape = tuple(leaf.shape)
        if mesh is not None:
            where = _path_text(root, path)
            spec = _spec_for(where, specs, used)
            own = _own_sharding(leaf, mesh)
            if own is not None and (spec is None or _same_spec(spec, own.spec)):
                if target.present:  # already placed on these devices by the user: keep it
                    placement.input_shardings[where] = spec_text(own.spec) or "replicated"
                    placement.per_device_shapes[where] = (shape, tuple(own.shard_shape(shape)))
                    return leaf
                spec = own.spec
            # another --shard spec for an array the user placed: on the user's mesh axis types
            spec = spec if spec is not None else PartitionSpec()
            _check_divisible(where, shape, spec, mesh)
            sharding = NamedSharding(_mesh_like(mesh, own.mesh) if own else mesh, spec)
            placement.input_shardings[where] = spec_text(spec) or "replicated"
            placement.per_device_shapes[where] = (shape, tuple(sharding.shard_shape(shape)))
            return abstract_leaf(leaf, sharding)
        if not abstract:
            return leaf
        if target.devices:
            return abstract_leaf(leaf, make_single_device_sharding(target.devices[0]))
        return abstract_leaf(leaf)

    placed = []
    for i, arg in enumerate(args):
        if i in static:
            placed.append(arg)
            continue
        root = names[i] if i < len(names) else f"args[{i}]"
        placed.append(jax.tree_util.tree_map_with_path(lambda p, x, r=root: place(r, p, x), arg))
    placement.args = tuple(placed)
    placement.kwargs = {
        k: v
        if k in static_names
        else jax.tree_util.tree_map_with_path(lambda p, x, r=k: place(r, p, x), v)
        for k, v in kwargs.items()
    }
    unknown = [k for k in specs if k not in used]
    if unknown:
        legal = [n for i, n in enumerate(names) if i not in static] + list(kwargs)
        raise TargetError(
            f"--shard names {unknown[0]!r}, which is not an array argument",
            code="NBC601",
            hint=f"arguments are: {', '.join(legal)} "
            "(use ARG or ARG.path.into.pytree, e.g. x=data,None)",
        )
    return placement


def output_shardings(compiled: Any, out_info: Any) -> tuple[dict[str, str], dict[str, tuple]]:
    """(path -> spec text, path -> (global, per-device shape)) of a compiled program's outputs."""
    import jax
    from jax.sharding import NamedSharding

    texts: dict[str, str] = {}
    shapes: dict[str, tuple] = {}
    flat_shard = jax.tree_util.tree_leaves(compiled.output_shardings)
    flat_info = jax.tree_util.tree_flatten_with_path(out_info)[0]
    for (path, info), sharding in zip(flat_info, flat_shard, strict=False):
        where = _path_text("output", path)
        spec = sharding.spec if isinstance(sharding, NamedSharding) else None
        texts[where] = (spec_text(spec) or "replicated") if spec is not None else str(sharding)
        shape = tuple(info.shape)
        shapes[where] = (shape, tuple(sharding.shard_shape(shape)))
    return texts, shapes


def program_collectives(
    hlo_text: str | None, target: Target, devices: list[Any] | None = None
) -> list[dict[str, Any]]:
    """The collectives of a compiled program, ``crosses_hosts`` / ``crosses_processes`` set
    from the target's mesh, else from ``devices`` (the program's own, in partition order)."""
    if not hlo_text:
        return []
    mesh = target.mesh
    if mesh is not None and hasattr(mesh, "devices"):
        devices = list(mesh.devices.flat)
    return collectives(hlo_text, devices)
