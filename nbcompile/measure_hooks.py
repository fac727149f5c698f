"""What ``--bench``, ``--ablate``, ``--debug`` and ``--freeze`` add to a Compilation.

Each result goes into ``compilation.extras`` (and so into the report and every view).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Progress = Callable[[str], None] | None


def run(comp: Any, options: Any, progress: Progress = None) -> None:
    """Run the measurements the options ask for (and ``comp`` lacks) and store them on it."""
    if options.bench and "bench" not in comp.extras:
        from .measure import bench

        result = bench(comp.original, comp.args, compiled=comp.fn,
                       compile_seconds=comp.timings.get("compile"), progress=progress)
        comp.extras["bench"] = {**result.to_json(), "text": result.text()}
        comp._timings.update(_bench_timings(result.to_json()))
    if options.ablate and "ablate" not in comp.extras:
        from .measure import ablate

        if progress:
            progress("ablating (recompiling without fusion / constant folding)")
        result = ablate(comp.lowered, comp.args)
        comp.extras["ablate"] = {**result.to_json(), "text": result.text()}
    if options.debug and "debug" not in comp.extras:
        from .debug import debug_run

        if progress:
            progress("debugging (running op by op)")
        result = debug_run(comp.jaxpr, comp.args, source=comp.source)
        comp.debug = result
        comp.extras["debug"] = {**result.to_json(), "text": result.text()}


def _bench_timings(data: dict[str, Any]) -> dict[str, float]:
    """Median call times (``eager_call``, ``compiled_call``) for ``c.timings``."""
    out = {}
    for side in ("eager", "compiled"):
        value = (data.get(side) or {}).get("median")
        if isinstance(value, int | float):
            out[f"{side}_call"] = float(value)
    return out


def freeze(comp: Any, options: Any, progress: Progress = None) -> None:
    """Write the frozen model file and record what freezing did."""
    from .frozen import freeze as freeze_model

    if progress:
        progress(f"freezing to {options.freeze}")
    adapted = comp.adapted
    weights = tuple(adapted.weights_argnums) if adapted and adapted.weights_argnums else None
    # With --grad, the training graph (value_and_grad) is the reference the frozen inference
    # program is compared with, in the same unit: StableHLO ops.
    training_ops = None
    if comp.grad is not None:
        training_ops = comp.grad.analysis.summary().get("stablehlo_ops")
    result = freeze_model(comp.original, *comp.args, path=options.freeze,
                          weights_argnums=weights, constants=options.freeze_constants,
                          name=comp.name, reference_ops=training_ops)
    comp.freeze_result = result
    comp.extras["freeze"] = {**result.to_json(), "text": result.text()}
