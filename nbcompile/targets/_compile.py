"""Compile a function for a :class:`Target`: the device here, a deviceless topology, or lower only.

Example arguments become ``jax.ShapeDtypeStruct``s placed on the target's devices (a
``NamedSharding`` over the mesh when there is one, from ``--shard`` specs), so nothing is copied
to a device and devices that are not here can be compiled for.
"""

from __future__ import annotations

import inspect
import math
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import CompileError, LowerError, TargetError
from ._collectives import collectives
from ._mesh import parse_shard_specs
from ._quiet import captured_stderr
from ._resolve import Target

__all__ = ["TargetCompile", "compile_for_target"]


@dataclass
class TargetCompile:
    """What compiling for a target produced.

    ``compiled`` and ``hlo_text`` are None when ``target.lower_only``; ``cost`` / ``memory`` are
    None where XLA gives none (e.g. deviceless GPU cost). With a mesh, ``input_shardings`` /
    ``output_shardings`` map argument paths (``x``, ``params.w1``, ``output[0]``) to their
    ``PartitionSpec`` text and ``per_device_shapes`` to ``(global shape, per-device shape)``.
    ``jitted`` is the ``jax.jit`` object that was traced.
    """

    target: Target
    traced: Any
    lowered: Any
    compiled: Any | None
    hlo_text: str | None
    stablehlo: str
    notes: list[str] = field(default_factory=list)
    input_shardings: dict[str, str] = field(default_factory=dict)
    output_shardings: dict[str, str] = field(default_factory=dict)
    per_device_shapes: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = field(
        default_factory=dict
    )
    timings: dict[str, float] = field(default_factory=dict)
    cost: dict[str, float] | None = None
    memory: Any | None = None
    jitted: Any | None = None

    def collectives(self) -> list[dict[str, Any]]:
        """The collectives of the compiled program, ``crosses_hosts`` set from the mesh."""
        if not self.hlo_text:
            return []
        mesh = self.target.mesh
        devices = list(mesh.devices.flat) if mesh is not None and hasattr(mesh, "devices") else None
        return collectives(self.hlo_text, devices)


def _param_names(fn: Any, count: int) -> list[str]:
    base = getattr(fn, "__wrapped__", fn)
    try:
        params = list(inspect.signature(base).parameters.values())
    except (TypeError, ValueError):
        params = []
    names: list[str] = []
    for i in range(count):
        p = params[i] if i < len(params) else None
        ok = p is not None and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        names.append(p.name if ok else str(i))
    return names


def _static_indices(names: list[str], jit_kwargs: dict[str, Any]) -> set[int]:
    nums = jit_kwargs.get("static_argnums") or ()
    argnames = jit_kwargs.get("static_argnames") or ()
    nums = (nums,) if isinstance(nums, int) else tuple(nums)
    argnames = (argnames,) if isinstance(argnames, str) else tuple(argnames)
    return {n % len(names) for n in nums if names} | {
        i for i, n in enumerate(names) if n in argnames
    }


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


def _check_divisible(path: str, shape: tuple[int, ...], spec: Any, mesh: Any) -> None:
    if len(spec) > len(shape):
        raise TargetError(
            f"--shard {path}={_spec_text(spec)} has {len(spec)} entries but {path} has "
            f"{len(shape)} dimensions {shape}",
            code="NBC601",
            hint=f"give at most one entry per dimension, e.g. {path}={','.join(['None'] * len(shape))}",
        )
    for dim, axes in zip(shape, spec, strict=False):
        if axes is None:
            continue
        axes = (axes,) if isinstance(axes, str) else tuple(axes)
        size = math.prod(mesh.shape[a] for a in axes)
        if dim % size:
            raise TargetError(
                f"--shard {path}={_spec_text(spec)}: a dimension of size {dim} cannot be split "
                f"over {'+'.join(axes)} ({size} devices)",
                code="NBC601",
                hint="shard a dimension divisible by the mesh axis size, or change --mesh",
            )


def _spec_text(spec: Any) -> str:
    return ",".join("None" if a is None else a if isinstance(a, str) else "+".join(a) for a in spec)


def _abstract_args(
    args: tuple[Any, ...],
    names: list[str],
    static: set[int],
    target: Target,
    specs: dict[str, Any],
) -> tuple[tuple[Any, ...], dict[str, str], dict[str, tuple]]:
    import jax
    from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

    shardings: dict[str, str] = {}
    shapes: dict[str, tuple] = {}
    used: set[str] = set()
    mesh = target.mesh

    def place(root: str, path: tuple[Any, ...], leaf: Any) -> Any:
        if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
            return leaf
        shape = tuple(leaf.shape)
        weak = bool(getattr(leaf, "weak_type", False))
        if mesh is not None:
            where = _path_text(root, path)
            spec = _spec_for(where, specs, used) or PartitionSpec()
            _check_divisible(where, shape, spec, mesh)
            sharding = NamedSharding(mesh, spec)
            shardings[where] = _spec_text(spec) or "replicated"
            shapes[where] = (shape, tuple(sharding.shard_shape(shape)))
        elif target.devices and not target.present:
            sharding = SingleDeviceSharding(target.devices[0])
        elif target.present:
            return leaf
        else:
            sharding = None
        return jax.ShapeDtypeStruct(shape, leaf.dtype, sharding=sharding, weak_type=weak)

    placed = []
    for i, arg in enumerate(args):
        if i in static:
            placed.append(arg)
            continue
        placed.append(
            jax.tree_util.tree_map_with_path(lambda p, x, i=i: place(names[i], p, x), arg)
        )
    unknown = [k for k in specs if k not in used]
    if unknown:
        raise TargetError(
            f"--shard names {unknown[0]!r}, which is not an array argument",
            code="NBC601",
            hint=f"arguments are: {', '.join(n for i, n in enumerate(names) if i not in static)} "
            "(use ARG or ARG.path.into.pytree, e.g. x=data,None)",
        )
    return tuple(placed), shardings, shapes


def _output_shardings(compiled: Any, out_info: Any) -> tuple[dict[str, str], dict[str, tuple]]:
    import jax
    from jax.sharding import NamedSharding

    texts: dict[str, str] = {}
    shapes: dict[str, tuple] = {}
    flat_shard = jax.tree_util.tree_leaves(compiled.output_shardings)
    flat_info = jax.tree_util.tree_flatten_with_path(out_info)[0]
    for (path, info), sharding in zip(flat_info, flat_shard, strict=False):
        where = _path_text("output", path)
        spec = sharding.spec if isinstance(sharding, NamedSharding) else None
        texts[where] = (_spec_text(spec) or "replicated") if spec is not None else str(sharding)
        shape = tuple(info.shape)
        shapes[where] = (shape, tuple(sharding.shard_shape(shape)))
    return texts, shapes


def _normalise_cost(cost: Any) -> dict[str, float] | None:
    if isinstance(cost, list | tuple):
        cost = cost[0] if cost else None
    if not isinstance(cost, dict):
        return None
    return {k: float(v) for k, v in cost.items() if isinstance(v, int | float)}


def compile_for_target(
    fn: Any,
    args: tuple[Any, ...],
    target: Target,
    *,
    shard_specs: dict[str, str] | None = None,
    jit_kwargs: dict[str, Any] | None = None,
) -> TargetCompile:
    """Trace, lower and (unless ``target.lower_only``) compile ``fn(*args)`` for ``target``.

    ``fn`` is a function or a ``jax.jit`` object; ``shard_specs`` maps argument names (or
    positional indices / pytree paths) to ``--shard`` specs and needs ``target.mesh``.
    Tracing errors are JAX's own; lowering / XLA failures raise ``LowerError`` / ``CompileError``.
    """
    import jax

    jit_kwargs = dict(jit_kwargs or {})
    jitted = fn if hasattr(fn, "trace") and not jit_kwargs else jax.jit(fn, **jit_kwargs)
    names = _param_names(fn, len(args))
    if shard_specs and target.mesh is None:
        raise TargetError("--shard needs --mesh", code="NBC601", hint="add e.g. --mesh 4x2")
    axis_names = tuple(target.mesh.axis_names) if target.mesh is not None else None
    specs = parse_shard_specs(shard_specs, axis_names)
    static = _static_indices(names, jit_kwargs)
    placed, in_texts, in_shapes = _abstract_args(args, names, static, target, specs)
    notes = [target.note] if target.note else []
    timings: dict[str, float] = {}

    start = time.perf_counter()
    traced = jitted.trace(*placed)
    timings["trace"] = time.perf_counter() - start
    start = time.perf_counter()
    with captured_stderr() as noise:
        try:
            platforms = (target.platform,) if target.lower_only else None
            lowered = traced.lower(lowering_platforms=platforms)
        except Exception as err:
            raise LowerError(
                f"lowering for {target.label} failed: {_first_line(err)}",
                hint=_noise_hint(noise.text),
            ) from err
    timings["lower"] = time.perf_counter() - start
    result = TargetCompile(
        target,
        traced,
        lowered,
        None,
        None,
        lowered.as_text(),
        notes,
        in_texts,
        {},
        in_shapes,
        timings,
        jitted=jitted,
    )
    if target.lower_only:
        return result
    start = time.perf_counter()
    with captured_stderr() as noise:
        try:
            compiled = lowered.compile()
        except Exception as err:
            raise CompileError(
                f"XLA could not compile for {target.label}: {_first_line(err)}",
                hint=_noise_hint(noise.text),
            ) from err
    timings["compile"] = time.perf_counter() - start
    result.compiled = compiled
    result.hlo_text = compiled.as_text()
    result.cost = _normalise_cost(_safe(compiled.cost_analysis))
    result.memory = _safe(compiled.memory_analysis)
    if target.mesh is not None:
        out_texts, out_shapes = _output_shardings(compiled, traced.out_info)
        result.output_shardings = out_texts
        result.per_device_shapes.update(out_shapes)
    return result


def _safe(call: Any) -> Any:
    """Cost and memory analyses are best-effort in JAX: unavailable -> None."""
    try:
        return call()
    except Exception:
        return None


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _noise_hint(text: str) -> str | None:
    lines = [line for line in text.splitlines() if line.strip()]
    return f"the compiler said: {lines[-1][:200]}" if lines else None
