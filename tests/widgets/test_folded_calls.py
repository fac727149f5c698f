"""A function called thousands of times while tracing (issue 41 item 2): the picture draws at most
``CHUNK_FANOUT`` chunks of them, and a chunk holding only calls of one function says which calls
it folded (``cheap#1–#50 (50 calls) · mul, add … (1–100 of 800)``), in the widget and in the
static picture alike. A chunk mixing two functions keeps the plain op summary.

The models are this file's own functions: a test file is the user's code.
"""

from __future__ import annotations

import itertools
import re

import jax.numpy as jnp

import nbcompile
from nbcompile.report.graphmodel import CHUNK_FANOUT, prepare_graph

from .test_layout_parity import NODE, _check

RUN = re.compile(r"^(\w+)#(\d+)–#(\d+) \((\d+) calls\) · ")


def cheap(x, i):
    return x * float(i) + 1.0


def other(x, i):
    return x - float(i)


def _pairwise(parts):
    while len(parts) > 1:  # a pairwise sum: the program stays shallow
        parts = [a + b for a, b in zip(parts[::2], parts[1::2], strict=False)] + parts[
            len(parts) & ~1 :
        ]
    return parts[0]


def many(x):
    return _pairwise([cheap(x, i) for i in range(400)])


def mixed(x):
    return _pairwise([(cheap if i % 2 else other)(x, i) for i in range(400)])


def _chunks(fn):
    report = nbcompile.compile(fn, jnp.float32(0.5)).report()
    pg = prepare_graph(report["graphs"]["traced"], report)
    top = [pg.groups[i] for typ, i, _ in pg.groups[""].items if typ == "group"]
    return report, pg, top


def test_repeated_calls_fold_into_chunks_that_name_them(tmp_path):
    report, _pg, top = _chunks(many)
    assert 2 <= len(top) <= CHUNK_FANOUT
    runs = [RUN.match(g.label) for g in top if g.kind == "chunk"]
    folded = [m for m in runs if m is not None]
    assert folded, [g.label for g in top]
    # the runs cover cheap#1 … #400 once each, in order, and say how many calls they hold
    assert all(m.group(1) == "cheap" for m in folded)
    spans = [(int(m.group(2)), int(m.group(3)), int(m.group(4))) for m in folded]
    assert spans[0][0] == 1 and spans[-1][1] == 400
    assert sum(n for _lo, _hi, n in spans) == 400
    assert all(hi - lo + 1 == n for lo, hi, n in spans)
    assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(spans))
    if NODE is not None:
        _check(report, tmp_path, limit=25)  # the front end labels the chunks the same


def test_a_chunk_of_two_functions_keeps_the_op_summary():
    _report, _pg, top = _chunks(mixed)
    chunks = [g for g in top if g.kind == "chunk"]
    assert chunks and not any(RUN.match(g.label) for g in chunks), [g.label for g in chunks]
