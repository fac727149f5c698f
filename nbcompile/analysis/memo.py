"""The analysis of a program, kept by fingerprint so that compiling the same program again
(``-f`` on a warm JAX cache, a re-run after a kernel-level cache miss) costs a lookup.

A program's *fingerprint* covers everything the analysis reads: XLA's optimised HLO text (which
carries the source locations of every op), the traced program's structure (each equation's
primitive, in walk order), argument names, the compiling cell's content hash and text, the
backend and the ``value_and_grad`` argnums. What it may not cover is refreshed on a hit: the
traced graph's equation -> node map (equations are new objects on every trace) and the cell
execution counts in locations (re-running an unchanged cell gives it a new number).
"""

from __future__ import annotations

import copy
import hashlib
import time
import weakref
from collections import OrderedDict
from typing import Any

from ..capture.source import Location, SourceInfo, cell_identity
from .artifacts import Artifacts
from .core import Analysis, analyse
from .lines import Locator
from .traced import walk_order

__all__ = ["analyse_cached", "clear_analysis_cache", "fingerprint", "refresh_locations"]

#: analyses kept (each holds two graphs: tens of MB for a GPT-2-sized train step)
CAPACITY = 4
_CACHE: OrderedDict[str, Analysis] = OrderedDict()


def fingerprint(artifacts: Artifacts) -> str | None:
    """A digest of what the analysis of ``artifacts`` depends on; None when the program has no
    optimised HLO (not compiled: nothing cheap identifies it). The traced program's structure
    is checked on a hit (each equation's primitive, in walk order), not hashed here, so that a
    miss costs only this digest (~15 ms for a GPT-2-small train step)."""
    if artifacts.hlo_text is None:
        return None
    closed = artifacts.closed_jaxpr
    jaxpr = closed.jaxpr
    names = getattr(getattr(jaxpr, "debug_info", None), "arg_names", None)
    source = artifacts.source
    # a cache key, not a security check
    digest = hashlib.sha1(artifacts.hlo_text.encode(), usedforsecurity=False)
    parts = (
        repr(names),
        repr([str(v.aval) for v in jaxpr.invars]),
        repr(len(closed.consts)),
        repr(len(jaxpr.eqns)),
        cell_identity(source.filename or ""),
        source.text,
        artifacts.backend,
        artifacts.name,
        repr(artifacts.grad_argnums),
        repr(type(artifacts.fn)),
    )
    for part in parts:
        digest.update(b"\1" + part.encode())
    return digest.hexdigest()


def clear_analysis_cache() -> None:
    _CACHE.clear()


def analyse_cached(artifacts: Artifacts) -> Analysis:
    """:func:`~nbcompile.analysis.analyse`, or the analysis of the same program done before
    (refreshed for this trace: see the module docstring). ``timings`` says which:
    ``analyse.cache_hit`` on a hit."""
    t0 = time.perf_counter()
    key = fingerprint(artifacts)
    digest_seconds = time.perf_counter() - t0
    cached = _CACHE.get(key) if key is not None else None
    eqns = walk_order(artifacts.closed_jaxpr) if cached is not None else []
    if cached is None or not _same_structure(cached, eqns):
        analysis = analyse(artifacts)
        analysis.timings["analyse.fingerprint"] = digest_seconds
        analysis.fingerprint = key
        if key is not None:
            _CACHE[key] = analysis
            while len(_CACHE) > CAPACITY:
                _CACHE.popitem(last=False)
        return analysis
    _CACHE.move_to_end(key)
    if _relabel(cached, Locator(artifacts.source)):
        cached._json = None
    graph = copy.copy(cached.traced_graph)
    graph.eqn_nodes = {id(e): node for e, node in zip(eqns, cached.walk_order, strict=True)}
    hit = copy.copy(cached)
    hit.traced_graph = graph
    if hit._shares is None and hit.shares_from is not None and artifacts.compiled is not None:
        # the shares are made from the compiled program, held weakly: this compile's
        hit.shares_from = (weakref.ref(artifacts.compiled), *hit.shares_from[1:])
    hit.timings = {"analyse.cache_hit": time.perf_counter() - t0}
    return hit


def _same_structure(cached: Analysis, eqns: list[Any]) -> bool:
    """Whether this trace's equations are the cached analysis's, one for one (primitives in
    walk order: each equation's node is named after its primitive)."""
    if len(eqns) != len(cached.walk_order):
        return False
    node = cached.traced_graph.node
    return all(node(n).op == e.primitive.name for e, n in zip(eqns, cached.walk_order, strict=True))


def _relabel(analysis: Analysis, locator: Locator) -> bool:
    """Give every location the execution count its cell has now (in place: the analysis is the
    same program's, and its cells are the same code); True if any location changed."""
    now: dict[str, tuple[int | None, str]] = {}
    changed: dict[Location, Location] = {}

    def check(loc: Location) -> None:
        if loc.file not in now:
            now[loc.file] = locator.cells.resolve(loc.file)
        count, file = now[loc.file]
        if (count, file) != (loc.cell, loc.file):
            changed[loc] = Location(count, file, loc.line, loc.detail)

    for loc in analysis.located:
        check(loc)
    for loop in analysis.loops:
        if loop.location is not None:
            check(loop.location)
    for _lines, locations in analysis.kernel_sites.values():
        for loc in locations:
            check(loc)
    if not changed:
        return False

    def new(loc: Location) -> Location:
        return changed.get(loc, loc)

    for fusion in analysis.fusions:
        fusion.locations = [changed.get(loc, loc) for loc in fusion.locations]
    analysis.kernel_sites = {
        k: (lines, [changed.get(loc, loc) for loc in locs])
        for k, (lines, locs) in analysis.kernel_sites.items()
    }
    analysis.located = {changed.get(loc, loc): e for loc, e in analysis.located.items()}
    for loop in analysis.loops:
        if loop.location is not None:
            loop.location = new(loop.location)
    for graph in (analysis.traced_graph, analysis.compiled_graph):
        for node in graph.nodes if graph is not None else ():
            if node.location is not None:
                node.location = new(node.location)
                node.file = node.location.file
    for source in analysis.sources:
        if source["file"] in now:
            probe = Location(*now[source["file"]], 1)
            source.update(
                cell=probe.cell,
                file=probe.file,
                label=probe.source_label,
                key_prefix=probe.label[:-1],
            )
    return True


def refresh_locations(analysis: Analysis, source: SourceInfo) -> None:
    """Give the locations of an analysis the execution counts their cells have now (call it
    when a cached program is shown again: re-running an unchanged cell renumbers it). Cheap:
    one look-up per distinct location."""
    if _relabel(analysis, Locator(source)):
        analysis._json = None  # its JSON named the old cell numbers
