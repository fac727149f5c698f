"""What ``--bench``, ``--ablate``, ``--debug`` and ``--freeze`` add to a Compilation.

Each result goes into ``compilation.extras`` (and so into the report and every view).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Progress = Callable[[str], None] | None


def run(comp: Any, options: Any, progress: Progress = None) -> None:
    """Run the measurements the options ask for and store them on ``comp``."""
    if options.bench:
        from .measure import bench

        result = bench(comp.original, comp.args, compiled=comp.fn,
                       compile_seconds=comp.timings.get("compile"), progress=progress)
        comp.extras["bench"] = {**result.to_json(), "text": result.text()}
        comp._timings.update(_bench_timings(result.to_json()))
    if options.ablate:
        from .measure import ablate

        if progress:
            progress("ablating (recompiling without fusion / constant folding)")
        result = ablate(comp.lowered, comp.args)
        comp.extras["ablate"] = {**result.to_json(), "text": result.text()}
    if options.debug:
        from .debug import debug_run

        if progress:
            progress("debugging (running op by op)")
        result = debug_run(comp.jaxpr, comp.args, source=comp.source)
        comp.debug = result
        comp.extras["debug"] = {**result.to_json(), "text": result.text()}


def _bench_timings(data: dict[str, Any]) -> dict[str, float]:
    out = {}
    for key in ("eager_median", "compiled_median"):
        value = data.get(key)
        if isinstance(value, int | float):
            out[key.replace("_median", "_call")] = float(value)
    return out


def freeze(comp: Any, options: Any, progress: Progress = None) -> None:
    """Write the frozen model file and record what freezing did."""
    from .freeze import freeze as freeze_model

    if progress:
        progress(f"freezing to {options.freeze}")
    adapted = comp.adapted
    weights = tuple(adapted.weights_argnums) if adapted and adapted.weights_argnums else None
    result = freeze_model(comp.original, *comp.args, path=options.freeze,
                          weights_argnums=weights, constants=options.freeze_constants,
                          name=comp.name)
    data = result.to_json()
    training_ops = None
    if comp.grad is not None:
        training_ops = comp.grad.analysis.summary().get("jaxpr_eqns")
    data["training_graph_eqns"] = training_ops
    data["inference_graph_eqns"] = comp.analysis.summary().get("jaxpr_eqns")
    comp.extras["freeze"] = {**data, "text": result.text()}
