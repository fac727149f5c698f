"""No analysis stage is quadratic: each stage's time grows at most ~2.5x per doubling of the
program (fitted over programs of 1x, 2x and 4x the size: the gradient of a picoGPT-style GPT-2
loss with 2, 4 and 8 layers, analysed as ``--grad`` does: ~350 -> ~1,300 kernels).

"Size" is what the stage reads: jaxpr equations for the traced graph, HLO instructions before
optimisation for the pre-optimisation stage, optimised HLO instructions for the rest. (XLA's
optimised program itself grows faster than the layer count: 3.6k -> 7.7k -> 18.9k instructions
for 2 -> 4 -> 8 layers here, as some fused computations grow with depth; analysis can only be
linear in what it is given.)

Timed in CPU time of the analysing thread (``time.thread_time``), the best of three runs per
size, the sizes interleaved, so that other work on a shared machine does not count; on a VM the
thread's CPU time still holds what the host gave to others, so a growth over its limit is
measured again (up to six more rounds) before it fails -- a quadratic stage fails every round
(``test_a_quadratic_stage_fails``). Two ways through the analysis:
the model in a user file (every kernel has a source), and the model seen as library code (no
kernel has a user frame: every fusion's source is inferred from its neighbours, the search that
was quadratic before). XLA's own analyses (``cost_analysis()``, ``memory_analysis()`` -- in their own thread,
``analyse.xla_beside``, its CPU time -- the StableHLO -> HLO conversion) are timed apart, with a looser bound: they grow a little faster
than the program in XLA itself (x18-20 for x15 instructions, measured), and a quadratic one
would still fail.
"""

from __future__ import annotations

import math
import time

import jax
import pytest

from benchmarks._gpt2 import gpt2_loss
from nbcompile.analysis import Artifacts, analyse, core, lines
from nbcompile.capture.source import SourceInfo

pytestmark = pytest.mark.slow

LAYERS = (2, 4, 8)
NBCOMPILE_LIMIT = 2.5  # per doubling
XLA_LIMIT = 3.0  # per doubling, for stages that are mostly XLA's own work (quadratic: 4)
XLA_STAGES = {"analyse.xla", "analyse.xla_beside", "analyse.pre_optimisation"}
FLOOR = 0.01  # seconds at the largest size: below this, timer noise dominates


@pytest.fixture(scope="module")
def programs():
    """value_and_grad of the loss, analysed as ``--grad`` does (the gradient stage runs too)."""
    out = []
    for n in LAYERS:
        fn, args = gpt2_loss(n_layer=n, d=64, n_head=4, vocab=256, n_ctx=16)
        with jax.numpy_rank_promotion("allow"):  # picoGPT's code broadcasts by rank
            traced = jax.jit(jax.value_and_grad(fn)).trace(*args)
        lowered = traced.lower()
        compiled = lowered.compile()
        out.append(
            Artifacts(
                closed_jaxpr=traced.jaxpr,
                lowered=lowered,
                compiled=compiled,
                hlo_text=compiled.as_text(),
                source=SourceInfo(),
                fn=fn,
                name="loss_fn",
                grad_argnums=(0,),
            )
        )
    return out


SIZE_OF = {"analyse.traced": "jaxpr_eqns", "analyse.pre_optimisation": "hlo_ops_before"}


def _best_of(programs: list[Artifacts], rounds: int, best: list[dict[str, float]]) -> list[dict]:
    """``rounds`` more analyses of every program, the sizes interleaved (2, 4, 8, 2, 4, 8, ...)
    so that a slow spell of a shared machine falls on all of them; ``best`` keeps each stage's
    least time per program. Returns each program's counts."""
    counts: list[dict] = [{} for _ in programs]
    for _ in range(rounds):
        for i, artifacts in enumerate(programs):
            analysis = analyse(artifacts)
            for stage, seconds in analysis.timings.items():
                best[i][stage] = min(seconds, best[i].get(stage, math.inf))
            counts[i] = analysis.counts
    return counts


def _growth(best: list[dict[str, float]], counts: list[dict]) -> list[tuple]:
    """(stage, ms per size, growth per doubling of the size, limit) for each stage that took
    long enough to measure: the growth fitted between the smallest and largest program."""
    report = []
    for stage in best[0]:
        times = [b[stage] for b in best]
        if times[-1] < FLOOR:
            continue
        size = [c[SIZE_OF.get(stage, "hlo_ops_after")] for c in counts]
        growth = 2 ** (math.log(times[-1] / max(times[0], 1e-6)) / math.log(size[-1] / size[0]))
        limit = XLA_LIMIT if stage in XLA_STAGES else NBCOMPILE_LIMIT
        report.append((stage, [round(t * 1000, 1) for t in times], round(growth, 2), limit))
    return report


@pytest.mark.parametrize("model_is_user_code", [True, False])
def test_every_stage_is_at_most_n_log_n(programs, monkeypatch, model_is_user_code):
    monkeypatch.setattr(core._Clock, "timer", staticmethod(time.thread_time))
    if not model_is_user_code:  # nothing is the user's: every source must be inferred
        monkeypatch.setattr(lines, "is_user_file", lambda file: False)
    kernels, report = _measure(programs)
    assert kernels[0] * 1.5 < kernels[1] and kernels[1] * 1.5 < kernels[2], kernels
    if not model_is_user_code:
        assert all(f.lines_inferred or not f.locations for f in analyse(programs[0]).fusions)
    assert report, "no stage took long enough to measure"
    failed = [r for r in report if r[2] > r[3]]
    assert not failed, (
        f"kernels {kernels}; stage, ms per size, growth per doubling, limit: {report}"
    )


def _measure(programs: list[Artifacts]) -> tuple[list[int], list[tuple]]:
    """Each program's kernel count, and each stage's growth (see :func:`_growth`)."""
    best: list[dict[str, float]] = [{} for _ in programs]
    counts = _best_of(programs, 3, best)
    report = _growth(best, counts)
    # CPU time on a shared VM still counts time the host gave to others (steal): a growth over
    # its limit is measured again, up to six more interleaved rounds, before it fails. A stage
    # that truly grows too fast does so in every round; a slow spell passes.
    for _ in range(6):
        if not any(r[2] > r[3] for r in report):
            break
        _best_of(programs, 1, best)
        report = _growth(best, counts)
    return [c["kernels"] for c in counts], report


def test_a_quadratic_stage_fails(programs, monkeypatch):
    """The measurement above can fail: folding made quadratic in the size the stage is measured
    against (optimised HLO instructions: CPU work ~ their number squared) is caught through
    every re-measurement. (Quadratic in the jaxpr's equations it measured 2.44 per doubling of
    the HLO on jaxlib 0.12.1, whose optimised program grows faster than the jaxpr: too close
    to the 2.5 limit to tell a quadratic stage.)"""
    monkeypatch.setattr(core._Clock, "timer", staticmethod(time.thread_time))
    find_folded = core.find_folded

    def quadratic(traced, pre, post, *args, **kwargs):
        n = sum(len(c.instructions) for c in post.computations.values()) // 8
        sum(i ^ j for i in range(n) for j in range(n))  # ~n^2 steps of CPU time
        return find_folded(traced, pre, post, *args, **kwargs)

    monkeypatch.setattr(core, "find_folded", quadratic)
    _, report = _measure(programs)
    folding = next(r for r in report if r[0] == "analyse.folding")
    assert folding[2] > folding[3], report
