"""Rows for ``--passes`` (issue 27): its overhead, ``c.kernel_code``, and the Passes tab's paint.

* ``--passes overhead``: subject ``nbcompile.compile`` + every analysis + ``c.run_passes()`` (one
  more compile with XLA's dump on, reading the pass log, the kernels' LLVM IR and objects) +
  the report (which then carries the Passes tab and the code of the costliest kernels), as
  ``%%compile --passes`` does before it shows the view; anchor the same without
  ``run_passes`` (``%%compile``). Fresh model per repetition, alternating which side goes first.
* ``kernel code``: on a fresh Compilation whose pass dump exists (compile + analysis +
  ``run_passes``, no report yet, so nothing of the dump was read for a kernel before), the first
  ``c.kernel_code(name)`` call for the costliest kernel with code of XLA's own: it includes
  reading every object's ELF symbol table once per dump, finding the kernel's function (for a
  fusion XLA compiled once for several, parsing the optimised HLO for the fusions'
  signatures), Capstone's disassembly and the IR look-up. The next calls on the same
  Compilation (the next costliest kernels) are in ``extra``.
* The Passes tab's first paint is measured in :mod:`benchmarks._display` on the last subject's
  Compilation (``passes_paint``).
"""

from __future__ import annotations

import gc
import time
from typing import Any

from benchmarks._extra_models import build
from benchmarks._stats import Row, Target, cold, paired, ratio_at_most

__all__ = ["kernel_code_row", "passes_overhead"]

#: kernels timed per fresh Compilation in the kernel-code row (the report carries 8)
KERNELS = 8


def _fresh(model: str) -> tuple[Any, tuple[Any, ...]]:
    fn, args = build(model)
    cold()  # a first compile: no analysis of an identical earlier repetition to reuse
    gc.collect()
    return fn, args


def passes_overhead(model: str, pairs: int, target: float | None, keep: dict[str, Any]) -> Row:
    """compile+analysis+run_passes+report vs compile+analysis+report; the last subject's
    Compilation goes to ``keep["last"]`` (for the Passes tab's paint)."""
    import nbcompile

    pass_seconds: list[float] = []
    steps: list[int] = []

    def once(with_passes: bool) -> float:
        fn, args = _fresh(model)
        t0 = time.perf_counter()
        c = nbcompile.compile(fn, *args, passes=with_passes)  # as %%compile --passes
        c.analysis  # noqa: B018 - every analysis, as the magic computes them for the view
        if with_passes:
            t1 = time.perf_counter()
            log = c.run_passes()
            pass_seconds.append(time.perf_counter() - t1)
            steps.append(len(log.steps) if log is not None else 0)
        report = c.report()
        elapsed = time.perf_counter() - t0
        if with_passes:
            assert "passes" in report.get("extras", {}), "the report carries no Passes tab"
            keep["last"] = c
        return elapsed

    row = Row(
        "--passes overhead",
        model,
        "s",
        "compile+analysis+run_passes+report",
        "compile+analysis+report",
        target=ratio_at_most(target),
        note=f"{pairs} pairs, fresh model per repetition; the subject compiles as %%compile --passes: "
        "its one XLA compile writes the dump (xla_dump_to + xla_dump_hlo_pass_re=.*, persistent "
        "cache off for it), then run_passes reads it",
    )
    subj, anch = paired(lambda: once(True), lambda: once(False), pairs)
    row.set_pairs(subj, anch)
    row.extra["run_passes_seconds"] = pass_seconds
    row.extra["pass_steps"] = steps
    return row


def kernel_code_row(model: str, reps: int, target: float | None) -> Row:
    """First ``c.kernel_code`` call on each of ``reps`` fresh Compilations with the dump."""
    import nbcompile
    from nbcompile.errors import NbcompileError
    from nbcompile.report.metal import costliest_kernels

    first: list[float] = []
    following: list[float] = []
    kernels: list[str] = []
    skipped = 0
    for _ in range(reps):
        fn, args = _fresh(model)
        c = nbcompile.compile(fn, *args)
        c.analysis  # noqa: B018
        c.run_passes()
        fusions = c.analysis.to_json().get("fusions") or []
        library = {f.get("name") or f["id"] for f in fusions if f.get("kind") == "custom"}
        names = [n for n in costliest_kernels(fusions) if n not in library]
        times: list[float] = []
        for name in names[: 3 * KERNELS]:
            if len(times) >= KERNELS:
                break
            gc.collect()
            t0 = time.perf_counter()
            try:
                code = c.kernel_code(name)
            except (NbcompileError, KeyError):
                skipped += 1
                continue
            times.append(time.perf_counter() - t0)
            if len(kernels) < KERNELS:
                kernels.append(f"{name} ({code.instructions} instructions)")
        if times:
            first.append(times[0])
            following.extend(times[1:])
    row = Row(
        "kernel code",
        model,
        "s",
        "first c.kernel_code(name), fresh Compilation",
        None,
        target=None if target is None else Target("subject", "<=", target, f"≤ {target:g} s"),
        note=f"{reps} fresh Compilations after run_passes (no report yet): the first call reads "
        "the objects' ELF symbol tables once per dump, then finds, disassembles (Capstone) and "
        f"maps the costliest kernel with code; the next {KERNELS - 1} calls' seconds in extra",
    )
    if first:
        row.set_pairs(first)
        row.extra["next_calls_s"] = [round(t, 5) for t in following]
        row.extra["next_calls_max_s"] = round(max(following), 5) if following else None
        row.extra["kernels"] = kernels
        row.extra["skipped_without_code"] = skipped
    else:
        row.note = "not measured: no kernel with code of XLA's own was found"
    return row
