"""Debug a static graph: run the traced program op by op, keep a summary of every value
(including the ones XLA fuses away), stop at the first NaN with its cell line, and say where the
compiled program computes something else (the HLO rewrite responsible).

    from nbcompile.debug import debug_run
    d = debug_run(closed_jaxpr, args, source=source_info)
    d.stopped, d.nan_at, d.summaries["e3"], d.value("e3")
    d.divergence.first, d.divergence.hlo_ops  # compiled vs op by op (nbcompile.debug.diverge)

Node ids are equation paths (``e12``, ``e12/body/e3``); see :mod:`nbcompile.debug.ids`.
"""

from .diverge import Divergence, differ, find_divergence
from .ids import equation_ids, subjaxprs
from .interpreter import Interpreter
from .run import DebugResult, debug_run, eqn_location
from .summary import summarise

__all__ = [
    "DebugResult",
    "Divergence",
    "Interpreter",
    "debug_run",
    "differ",
    "eqn_location",
    "equation_ids",
    "find_divergence",
    "subjaxprs",
    "summarise",
]
