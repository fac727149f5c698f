"""Analysis: pure functions from a compile's artifacts to data (no IPython, no widgets).

``analyse(artifacts)`` returns an :class:`Analysis` (graphs, fusions, folded constants,
gradient, cost, memory, per-line map, summary); ``diff(a, b)`` compares two of them.
"""

from __future__ import annotations

from .artifacts import Artifacts
from .compiled import Fusion
from .core import Analysis, analyse
from .diff import Diff, diff
from .folding import Folded
from .gradient import Gradient, Residual
from .graph import Edge, Graph, Group, Node
from .hlo import HloModule, HloParseError, parse_hlo

__all__ = [
    "Analysis",
    "Artifacts",
    "Diff",
    "Edge",
    "Folded",
    "Fusion",
    "Gradient",
    "Graph",
    "Group",
    "HloModule",
    "HloParseError",
    "Node",
    "Residual",
    "analyse",
    "diff",
    "parse_hlo",
]
