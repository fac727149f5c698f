"""Compile for a backend, topology, GPU target or mesh through :mod:`nbcompile.targets`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._compat import persistent_cache_disabled
from ..capture.source import SourceInfo
from . import Progress, Stages, make_jitted


def compile_on_target(
    target: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    backend: str | None,
    source: SourceInfo,
    name: str,
    jit_kwargs: dict[str, Any],
    progress: Progress | None = None,
    topology: str | None = None,
    gpu_target: str | None = None,
    mesh: str | None = None,
    shard: dict[str, str] | None = None,
) -> Any:
    """A Compilation for ``target`` on the requested platform (deviceless where needed)."""
    __tracebackhide__ = True
    from ..compilation import Compilation
    from ..targets import compile_for_target, resolve_target

    say = progress or (lambda _m: None)
    tgt = resolve_target(backend=backend, topology=topology, target=gpu_target, mesh=mesh)
    say(f"compiling for {tgt.platform}")
    fn = (lambda *a: target(*a, **kwargs)) if kwargs else target
    if tgt.present:
        tc = compile_for_target(fn, args, tgt, shard_specs=shard, jit_kwargs=jit_kwargs)
    else:
        with persistent_cache_disabled():
            tc = compile_for_target(fn, args, tgt, shard_specs=shard, jit_kwargs=jit_kwargs)
    stages = Stages(
        jitted=getattr(tc, "jitted", None) or make_jitted(target, jit_kwargs=jit_kwargs),
        traced=tc.traced, lowered=tc.lowered, compiled=tc.compiled, timings=dict(tc.timings),
    )
    comp = Compilation(
        name=name, fn=stages.jitted, original=target, stages=stages, source=source, args=args,
        backend=tgt.platform, options={**jit_kwargs, "target": _target_label(tgt)},
    )
    comp.target = tgt
    comp.target_compile = tc
    comp.notes.extend(n for n in tc.notes if n)  # includes the target's own note
    comp.extras["target"] = target_extras(tgt, tc)
    return comp


def target_extras(tgt: Any, tc: Any) -> dict[str, Any]:
    """What the view shows about the target: mode, shardings, per-device shapes, collectives."""
    mode = "present" if tgt.present else "deviceless" if tgt.deviceless else "lowered only"
    collectives = tc.collectives()
    lines = [f"target: {_target_label(tgt)} ({mode})"]
    for path, (global_shape, local) in tc.per_device_shapes.items():
        lines.append(f"  {path}: global {list(global_shape)} → per device {list(local)}"
                     f" [{tc.input_shardings.get(path) or tc.output_shardings.get(path) or ''}]")
    for c in collectives:
        hosts = " (crosses hosts)" if c.get("crosses_hosts") else ""
        lines.append(f"  collective {c.get('op')}: {c.get('bytes')} bytes{hosts}")
    return {
        "platform": tgt.platform, "mode": mode, "label": _target_label(tgt),
        "input_shardings": dict(tc.input_shardings),
        "output_shardings": dict(tc.output_shardings),
        "per_device_shapes": {k: [list(g), list(d)] for k, (g, d) in tc.per_device_shapes.items()},
        "collectives": [{k: v for k, v in c.items() if _plain(v)} for c in collectives],
        "text": "\n".join(lines),
    }


def _plain(value: Any) -> bool:
    return isinstance(value, str | int | float | bool | list | tuple | type(None))


def _target_label(tgt: Any) -> str:
    parts = [tgt.platform]
    for attr in ("topology", "target_name", "mesh_spec"):
        value = getattr(tgt, attr, None)
        if value:
            parts.append(str(value))
    return " ".join(parts)
