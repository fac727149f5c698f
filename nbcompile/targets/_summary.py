"""What the view shows about a target, and meshes read off the arguments' own shardings."""

from __future__ import annotations

from typing import Any

from ._placement import Placement
from ._resolve import Target

__all__ = ["infer_mesh", "target_label", "target_summary"]


def target_label(target: Target) -> str:
    """``tpu v5e:2x2 2x2:data,model``: platform, topology or GPU model, mesh."""
    parts = [target.platform]
    for value in (target.topology, target.gpu, target.mesh_spec):
        if value:
            parts.append(str(value))
    return " ".join(parts)


def _plain(value: Any) -> bool:
    return isinstance(value, str | int | float | bool | list | tuple | type(None))


def target_summary(
    target: Target,
    placement: Placement,
    output_shardings: dict[str, str],
    collectives: list[dict[str, Any]],
) -> dict[str, Any]:
    """Mode, shardings, per-device shapes and collectives, JSON-ready, with a ``text`` form."""
    mode = "present" if target.present else "deviceless" if target.deviceless else "lowered only"
    label = target_label(target)
    lines = [f"target: {label} ({mode})"]
    for path, (global_shape, local) in placement.per_device_shapes.items():
        spec = placement.input_shardings.get(path) or output_shardings.get(path) or ""
        lines.append(f"  {path}: global {list(global_shape)} → per device {list(local)} [{spec}]")
    for c in collectives:
        hosts = " (crosses hosts)" if c.get("crosses_hosts") else ""
        lines.append(f"  collective {c.get('op')}: {c.get('bytes')} bytes{hosts}")
    return {
        "platform": target.platform,
        "mode": mode,
        "label": label,
        "input_shardings": dict(placement.input_shardings),
        "output_shardings": dict(output_shardings),
        "per_device_shapes": {
            k: [list(g), list(d)] for k, (g, d) in placement.per_device_shapes.items()
        },
        "collectives": [{k: v for k, v in c.items() if _plain(v)} for c in collectives],
        "text": "\n".join(lines),
    }


def infer_mesh(tree: Any) -> str | None:
    """``--mesh`` text (``2x4:x,y``) of the one mesh the arrays in ``tree`` are sharded over
    (``NamedSharding``), so a compile for another target keeps the arguments' shardings;
    None when no array is sharded that way."""
    import jax
    from jax.sharding import NamedSharding

    shapes = set()
    for leaf in jax.tree_util.tree_leaves(tree):
        sharding = getattr(leaf, "sharding", None)
        if isinstance(sharding, NamedSharding) and sharding.mesh.size > 1:
            mesh = sharding.mesh
            shapes.add((tuple(mesh.shape.values()), tuple(mesh.axis_names)))
    if len(shapes) != 1:
        return None
    ((dims, names),) = shapes
    return "x".join(map(str, dims)) + ":" + ",".join(names)
