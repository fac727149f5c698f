"""``ablate``: recompile one lowered program with optimisations switched off, see what each bought.

Each variant recompiles the *same* ``jax.stages.Lowered`` with per-compile
``compiler_options={"xla_disable_hlo_passes": ...}`` (no global XLA_FLAGS). Per variant: top-level
kernels, HLO instruction count (all computations), XLA's ``bytes accessed`` and ``flops``
(``cost_analysis()``, None where XLA gives none), compile time, measured time per call and its
ratio to the baseline. Because XLA ignores unknown pass names, each variant also says whether its
optimised module really differs from the baseline (``changed``); one that does not is marked
``"no effect"`` — either the pass had nothing to do on this program or the name is wrong.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jax

from .._compat import compile_fresh
from ..analysis.hlo import parse_hlo
from ._calls import CallForm
from ._hlo import entry_kernels
from ._timing import Prepared, Timing, _fmt, time_call
from .passes import Variant, variants_for

__all__ = ["AblationResult", "VariantResult", "ablate"]


@dataclass
class VariantResult:
    """One recompile. ``effect`` is ``baseline``, ``changed``, ``no effect`` or ``failed``."""

    name: str
    label: str
    disabled: tuple[str, ...]
    kernels: int | None = None
    hlo_ops: int | None = None
    bytes_accessed: float | None = None
    flops: float | None = None
    compile_seconds: float | None = None
    time: Timing | None = None
    ratio: float | None = None
    changed: bool | None = None
    error: str | None = None

    @property
    def effect(self) -> str:
        if self.error:
            return "failed"
        if not self.disabled:
            return "baseline"
        return "changed" if self.changed else "no effect"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "label": self.label,
            "disabled": list(self.disabled),
            "kernels": self.kernels,
            "hlo_ops": self.hlo_ops,
            "bytes_accessed": self.bytes_accessed,
            "flops": self.flops,
            "compile_seconds": self.compile_seconds,
            "time": self.time.to_json() if self.time else None,
            "ratio": self.ratio,
            "changed": self.changed,
            "effect": self.effect,
            "error": self.error,
        }


@dataclass
class AblationResult:
    """All variants, baseline first. ``result["no_loop_fusion"]`` gets one by name."""

    platform: str
    variants: list[VariantResult]
    notes: list[str] = field(default_factory=list)

    def __getitem__(self, name: str) -> VariantResult:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(f"no ablation variant {name!r}; have {[v.name for v in self.variants]}")

    def to_json(self) -> dict[str, Any]:
        return {
            "platform": self.platform,
            "variants": [v.to_json() for v in self.variants],
            "notes": list(self.notes),
        }

    def text(self) -> str:
        lines = []
        for v in self.variants:
            if v.error:
                lines.append(f"{v.label}: failed ({v.error})")
                continue
            row = f"{v.label}: {v.kernels} kernels, {v.hlo_ops} HLO ops"
            if v.bytes_accessed is not None:
                row += f", {v.bytes_accessed / 1e6:.3g} MB accessed"
            if v.time is not None:
                row += f", {_fmt(v.time.median)}"
                row += f" ({v.ratio:.2f}× baseline)" if v.ratio and v.disabled else ""
            if v.effect == "no effect":
                row += " — no effect on this program"
            lines.append(row)
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def _platform_of(args: Sequence[Any]) -> str:
    for leaf in jax.tree.leaves(args):
        devices = getattr(getattr(leaf, "sharding", None), "device_set", None)
        if devices and not (isinstance(leaf, jax.Array) and leaf.is_deleted()):
            return next(iter(devices)).platform
    return jax.default_backend()


def _cost(compiled: Any) -> dict[str, Any]:
    """XLA's cost analysis; ``{}`` where the backend gives none (JAX returns None then)."""
    cost = compiled.cost_analysis()
    if isinstance(cost, list | tuple):  # older JAX: one dict per program
        cost = cost[0] if cost else None
    return dict(cost) if cost else {}


def _as_variant(v: Variant | tuple[str, Sequence[str]]) -> Variant:
    if isinstance(v, Variant):
        return v
    name, disabled = v
    return Variant(name, name.replace("_", " "), tuple(disabled))


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and value >= 0 else None


def ablate(
    lowered: Any,
    args: Sequence[Any],
    *,
    kwargs: dict[str, Any] | None = None,
    variants: Sequence[Variant | tuple[str, Sequence[str]]] | None = None,
    time_it: bool = True,
    max_seconds: float = 20.0,
    platform: str | None = None,
    form: CallForm | None = None,
) -> AblationResult:
    """Recompile ``lowered`` once per variant (default: :func:`passes.variants_for` the platform;
    a variant may be given as ``(name, [pass, ...])``) and time each on ``args`` when ``time_it``.
    The first variant with no disabled passes is the baseline (one is added if missing).

    ``max_seconds`` caps the timing (shared evenly by the variants still to time); the compiles
    themselves always run. ``platform`` defaults to the platform of the first array argument.

    ``args``/``kwargs`` are what the compiled program takes (no static values); ``form``
    (:class:`~nbcompile.measure._calls.CallForm`) gives the full call instead. Donated
    buffers (``lowered.args_info``) are copied before every timed call, never consumed.
    """
    start = time.perf_counter()
    form = form or CallForm.of(tuple(args), dict(kwargs or {}), lowered=lowered)
    args = form.leaves()
    platform = platform or _platform_of(args)
    chosen = [
        _as_variant(v) for v in (variants if variants is not None else variants_for(platform))
    ]
    if not any(not v.disabled for v in chosen):
        chosen.insert(0, Variant("baseline", "all optimisations", ()))
    chosen.sort(key=lambda v: bool(v.disabled))  # baseline first, others in given order
    notes = []
    if len(chosen) == 1:
        notes.append(
            f"no XLA pass names are known for {platform!r}: only the baseline was compiled"
        )

    results: list[VariantResult] = []
    compiled_variants: list[Any] = []
    base_text: str | None = None
    for v in chosen:
        r = VariantResult(v.name, v.label, v.disabled)
        options = {"xla_disable_hlo_passes": ",".join(v.disabled)} if v.disabled else None
        t0 = time.perf_counter()
        try:
            # compile time is a figure here: XLA must run (JAX's caches would serve)
            compiled = compile_fresh(lowered, options)
        except jax.errors.JaxRuntimeError as exc:  # XLA refused this variant: say so, go on
            r.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            results.append(r)
            compiled_variants.append(None)
            continue
        r.compile_seconds = time.perf_counter() - t0
        text = compiled.as_text()
        module = parse_hlo(text)
        r.kernels = len(entry_kernels(module))
        r.hlo_ops = module.instruction_count()
        cost = _cost(compiled)
        r.bytes_accessed = _number(cost.get("bytes accessed"))
        r.flops = _number(cost.get("flops"))
        if not v.disabled:
            base_text = text
        r.changed = None if not v.disabled or base_text is None else text != base_text
        results.append(r)
        compiled_variants.append(compiled)

    if time_it:
        runnable = [
            (r, c) for r, c in zip(results, compiled_variants, strict=True) if c is not None
        ]
        for i, (r, compiled) in enumerate(runnable):
            left = max_seconds - (time.perf_counter() - start)
            budget = max(left / (len(runnable) - i), 0.02)
            try:
                r.time = time_call(_timed_call(compiled, form), budget)
            except RuntimeError as exc:  # XLA failed to run this variant: say so, go on
                notes.append(f"{r.name}: timing failed ({type(exc).__name__}: {exc})"[:300])
        base = results[0].time
        for r in results:
            if r.time is not None and base is not None:
                r.ratio = r.time.median / base.median
    return AblationResult(platform=platform, variants=results, notes=notes)


def _timed_call(compiled: Any, form: CallForm) -> Any:
    """One blocking call of a compiled variant on the dynamic values; where the program
    donates, on fresh copies made before each call (not timed)."""

    def run(inputs: tuple[tuple[Any, ...], dict[str, Any]]) -> None:
        jax.block_until_ready(compiled(*inputs[0], **inputs[1]))

    if form.donates:
        return Prepared(form.fresh_dynamic, run)
    dynamic = form.dynamic()
    return lambda: run(dynamic)
