"""Probe, not product: the instructions the call capture adds to one trace, counted by callgrind.

The capture row (``benchmarks/_capture_rows.py``) times the GPT-2-small train step's trace with
the capture and without; on a shared 2-core VM its pairs spread by +-3 % and more, as much as
the effect under study. Valgrind's callgrind counts the instructions each trace executes
instead: the same count on every run (to ~0.01 %), whatever else the machine does. This probe
traces the model once per variant, in one process, and callgrind dumps its counters before and
after each trace, so each trace's count is a dump of its own.

Variants (``--variants``, comma-separated, in order): ``off`` (``record_calls(enabled=False)``),
``full`` (the capture as shipped), and on the Python 3.13 backend (``capture/_events.py``)
``full+norec`` (calls never recorded: the events and context pushes only) and
``full+nopush+norec`` (the events' callbacks only). The variants past ``full`` patch the
backend's methods for this process only: they take the cost apart, they are not products.

Run (Valgrind installed; ~10 minutes for four variants on this VM)::

    valgrind --tool=callgrind --instr-atstart=no --dump-before=getppid \\
        --callgrind-out-file=/tmp/capture.%p python -m benchmarks.capture_instructions
    python -m benchmarks.capture_instructions --read /tmp/capture.PID

The first command turns callgrind's instrumentation on itself (``callgrind_control -i on``)
once the model is built and both sides have traced once (JAX's caches warm); the imports and
warm-up run uninstrumented. The second prints each variant's instructions and its difference to
``off``. Results: docs/benchmarks.md ("Call capture: instructions").
"""

from __future__ import annotations

import argparse
import gc
import glob
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

_MODEL = "GPT-2 small train"


def _variant(name: str) -> dict[str, Any]:
    """Patch the events backend for ``name`` (see the module docstring); returns what to undo."""
    from nbcompile.capture import _events

    # the stand-ins are builtins, not functions of this file: this file is the user's code to
    # the capture (as the model's is), and a Python stand-in would itself be recorded as calls
    undo: dict[str, Any] = {}
    parts = set(name.split("+")[1:])
    if "norec" in parts:
        undo["observe"] = _events._Events.observe
        _events._Events.observe = staticmethod(int)  # type: ignore[method-assign,assignment]
    if "nopush" in parts:
        undo["push"] = _events._Events.push
        # (takes the 1 to 3 arguments push is given, and does nothing with them)
        _events._Events.push = staticmethod(slice)  # type: ignore[method-assign,assignment]
    return undo


def _undo(undo: dict[str, Any]) -> None:
    from nbcompile.capture import _events

    for attr, value in undo.items():
        setattr(_events._Events, attr, value)


def run(variants: list[str]) -> None:
    from benchmarks._extra_models import build
    from nbcompile import _gc
    from nbcompile.capture.calls import record_calls
    from nbcompile.stages import make_jitted

    fn, args = build(_MODEL)

    def trace(variant: str) -> None:
        jitted = make_jitted(fn)
        gc.collect()
        undo = _variant(variant)
        try:
            with _gc.paused():
                os.getppid()  # callgrind dumps here (--dump-before=getppid): the trace's start
                with record_calls(enabled=variant != "off"):
                    jitted.trace(*args)
                os.getppid()  # and here: its end
        finally:
            _undo(undo)

    trace("off")
    trace("full")
    subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], check=True)
    for variant in variants:
        trace(variant)
    print(f"variants: {','.join(variants)}", file=sys.stderr)


def read(prefix: str, variants: list[str]) -> str:
    """Each variant's instructions from the dumps ``prefix.N``: with instrumentation on from the
    first measured trace, the dumps alternate between a trace and the gap to the next one."""
    counts = []
    for path in sorted(glob.glob(prefix + ".*"), key=lambda p: int(p.rsplit(".", 1)[1])):
        text = Path(path).read_text(encoding="utf-8", errors="replace")
        m = re.search(r"^summary: (\d+)", text, re.M)
        if m:
            counts.append(int(m.group(1)))
    # the dumps before instrumentation was on are empty (0) or tiny; the traces are the large
    # ones, in order
    counted = [c for c in counts if c > 0]
    if not counted:
        raise SystemExit(f"no dump under {prefix}.* holds a count: was the run finished?")
    traces = [c for c in counts if c > 10 * min(counted)]
    if len(traces) != len(variants):
        raise SystemExit(f"{len(traces)} trace dumps under {prefix}.*, {len(variants)} variants")
    base = dict(zip(variants, traces, strict=True)).get("off")
    lines = []
    for variant, count in zip(variants, traces, strict=True):
        line = f"{variant:<20} {count / 1e6:10.1f} M instructions"
        if base is not None and variant != "off":
            line += f"   {(count - base) / 1e6:+8.1f} M ({(count - base) / base:+.2%} of off)"
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--variants", default="off,full,full+norec,full+nopush+norec")
    parser.add_argument("--read", metavar="PREFIX", help="print the counts of a finished run")
    ns = parser.parse_args(argv)
    variants = ns.variants.split(",")
    if ns.read:
        print(read(ns.read, variants))
    else:
        run(variants)


if __name__ == "__main__":
    main()
