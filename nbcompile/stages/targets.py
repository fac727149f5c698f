"""Compile for a backend, topology, GPU target or mesh through :mod:`nbcompile.targets`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
    comp.notes.extend(n for n in [getattr(tgt, "note", None), *getattr(tc, "notes", [])] if n)
    return comp


def _target_label(tgt: Any) -> str:
    parts = [tgt.platform]
    for attr in ("topology", "target_name", "mesh_spec"):
        value = getattr(tgt, attr, None)
        if value:
            parts.append(str(value))
    return " ".join(parts)
