"""Analysis: pure functions from a compile's artifacts to data (no IPython, no widgets).

``analyse(artifacts)`` returns an :class:`Analysis` (graphs, fusions, folded constants,
gradient, cost, memory, per-line map, summary); ``analyse_cached`` the same, reused for a program
analysed before (by fingerprint); ``diff(a, b)`` compares two of them. ``locations_of`` /
``modules_of`` key any per-kernel result (profile, memory) by the user's source, as
:class:`Location` (``In [3] line 7``, ``model.py:12``).
"""

from __future__ import annotations

from ..capture.source import Location
from .artifacts import Artifacts
from .compiled import Fusion
from .core import Analysis, analyse
from .diff import Diff, diff
from .folding import Folded
from .gradient import Gradient, Residual
from .graph import Edge, Graph, Group, Node
from .hlo import HloModule, HloParseError, parse_hlo
from .located import locations_of, modules_of
from .memo import analyse_cached, clear_analysis_cache, fingerprint, refresh_locations
from .provenance import unlabelled

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
    "Location",
    "Node",
    "Residual",
    "analyse",
    "analyse_cached",
    "clear_analysis_cache",
    "diff",
    "fingerprint",
    "locations_of",
    "modules_of",
    "parse_hlo",
    "refresh_locations",
    "unlabelled",
]
