"""Fresh-process measurements: ``python -m benchmarks._workers KIND RESULT.json [ARGS...]``.

Each worker does its own timing (so interpreter start-up and imports are not counted) and writes
one JSON object to RESULT.json:

- ``jit-first-call MODEL``: ``jax.jit(f)(*args)`` first call in this fresh process;
- ``frozen-first-call MODEL PATH``: ``nbcompile.load(PATH)(*inputs)`` (load + first call);
- ``magic MODEL PAIRS``: an unchanged ``%%compile`` cell re-run in a real IPython shell vs a
  plain cell that calls the compiled function and a plain cell that traces and lowers the same
  model with JAX (what every re-run must pay), and that cell with the cyclic collector paused
  (as the re-run pauses it), interleaved;
- ``moved MODEL PAIRS``: the cell re-run with its code moved (a comment line more each time)
  vs the same cell forced to compile, interleaved;
- ``jaxviz MODEL...``: size of jaxviz's HTML (run with the peer's folder on PYTHONPATH).

Both first-call workers build the model (untimed) before timing, which starts the backend and
JAX's machinery the same way on both sides.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def jit_first_call(model: str) -> dict[str, Any]:
    import jax

    from benchmarks._extra_models import build

    fn, args = build(model)
    jax.block_until_ready(args)
    t0 = time.perf_counter()
    jax.block_until_ready(jax.jit(fn)(*args))
    return {"seconds": time.perf_counter() - t0}


def frozen_first_call(model: str, path: str) -> dict[str, Any]:
    import jax

    import nbcompile
    from benchmarks._extra_models import build

    _, args = build(model)  # same warm-up as jit_first_call; weights come from the file
    inputs = args[-1:]
    jax.block_until_ready(inputs)
    t0 = time.perf_counter()
    load = nbcompile.load  # imports nbcompile.frozen: start-up, reported apart, not counted
    t1 = time.perf_counter()
    loaded = load(path)
    t2 = time.perf_counter()
    jax.block_until_ready(loaded(*inputs))
    t3 = time.perf_counter()
    return {
        "seconds": t3 - t1,
        "import_seconds": t1 - t0,
        "load_seconds": t2 - t1,
        "call_seconds": t3 - t2,
    }


_ARG_NAMES = ("params", "x", "y", "z")


def _shell_with(model: str) -> tuple[Any, Callable[[str], float]]:
    """An IPython shell with nbcompile loaded and ``model_fn, example`` of ``model`` defined,
    and ``run(cell)``: the cell's wall seconds, its output swallowed (a failed cell raises)."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    quiet = io.StringIO()

    def run(cell: str) -> float:
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            t0 = time.perf_counter()
            result = shell.run_cell(cell)
            seconds = time.perf_counter() - t0
        if not result.success:
            raise RuntimeError(f"cell failed: {result.error_before_exec or result.error_in_exec}")
        quiet.seek(0)
        quiet.truncate()
        return seconds

    run("%load_ext nbcompile")
    run(f"from benchmarks._extra_models import build\nmodel_fn, example = build({model!r})")
    return shell, run


def magic(model: str, pairs: int) -> dict[str, Any]:
    import jax

    from benchmarks._inprocess import XlaCompileCounter

    counter = XlaCompileCounter.get()
    shell, run = _shell_with(model)
    n_args = len(shell.user_ns["example"])
    names = ", ".join(_ARG_NAMES[:n_args])
    run(f"{names}, = example")
    magic_cell = f"%%compile\ndef step({names}):\n    return model_fn({names})\nstep({names})\n"
    plain_cell = f"_out = jax.block_until_ready(step({names}))\n"
    # what every re-run must pay (SPEC §9.2): JAX's own trace and lowering of the same model,
    # through a fresh function each time so that JAX's trace cache serves nothing
    lower_cell = f"_lowered = jax.jit(lambda {names}: model_fn({names})).trace({names}).lower()\n"
    # the same with the cyclic collector paused, as the re-run pauses it (nbcompile/_gc.py):
    # JAX's trace and lowering without the full collections that whichever cell crosses the
    # collector's threshold pays (informative: what the re-run costs beyond a collector-free JAX)
    paused_cell = f"gc.disable()\ntry:\n    {lower_cell}finally:\n    gc.enable()\n"
    run("import jax, gc")
    first = run(magic_cell)
    compiled = shell.user_ns["step"]
    if not hasattr(compiled, "compilation"):
        raise RuntimeError("%%compile did not bind the compiled function")
    run(plain_cell)  # warm the plain path too
    run(lower_cell)
    run(paused_cell)
    before = counter.count
    subj: list[float] = []
    anch: list[float] = []
    lowering: list[float] = []
    paused: list[float] = []
    hits: list[bool] = []
    steps: dict[str, list[float]] = {}
    for i in range(pairs):
        order = [
            (subj, magic_cell),
            (anch, plain_cell),
            (lowering, lower_cell),
            (paused, paused_cell),
        ]
        for out, cell in order[i % 4 :] + order[: i % 4]:
            out.append(run(cell))
            if cell is magic_cell:
                c = shell.user_ns["step"].compilation
                hits.append(bool(c.cache_hit))
                for name, seconds in c.timings.items():
                    steps.setdefault(name, []).append(seconds)
    return {
        "subject": subj,
        "anchor": anch,
        "trace_lower": lowering,
        "trace_lower_paused": paused,
        "cache_hits": hits,
        "steps": {k: v for k, v in steps.items() if "." not in k},
        "first_run_seconds": first,
        "xla_compiles_during_reruns": counter.count - before,
        "jax": jax.__version__,
    }


def moved(model: str, pairs: int) -> dict[str, Any]:
    """The same program with its code moved (a comment line more above the compiled function
    each time, so every run's lines are new) vs the same cell forced to compile (``-f``):
    what reusing XLA's executable and re-reading the lines saves (SPEC §9.2)."""

    from benchmarks._inprocess import XlaCompileCounter

    counter = XlaCompileCounter.get()
    shell, run = _shell_with(model)
    names = ", ".join(_ARG_NAMES[: len(shell.user_ns["example"])])
    run(f"{names}, = example")

    def cell(comments: int, flags: str = "") -> str:
        pad = "# moved\n" * comments
        return f"%%compile{flags}\n{pad}def step({names}):\n    return model_fn({names})\nstep({names})\n"

    run(cell(0))
    subj: list[float] = []
    anch: list[float] = []
    reused: list[bool] = []
    xla: list[int] = []
    for i in range(pairs):
        order = ((subj, cell(i + 1)), (anch, cell(i + 1, " -f")))
        for out, text in order if i % 2 == 0 else order[::-1]:
            before = counter.count
            out.append(run(text))
            if out is subj:
                c = shell.user_ns["step"].compilation
                reused.append(bool(c.cache_hit))
                xla.append(counter.count - before)
    return {"subject": subj, "anchor": anch, "reused": reused, "xla_compiles": xla}


def jaxviz_sizes(models: list[str]) -> dict[str, Any]:
    import jaxviz

    from benchmarks._extra_models import build

    out: dict[str, Any] = {"version": _version("jaxviz"), "models": {}}
    for name in models:
        fn, args = build(name)
        t0 = time.perf_counter()
        try:
            html = jaxviz.trace_model(fn, *args, return_html=True)
        except Exception as exc:  # the peer failing on a model is a result, not a crash
            out["models"][name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            continue
        out["models"][name] = {
            "bytes": len(html.encode()),
            "seconds": time.perf_counter() - t0,
            "view": "global",
        }
    return out


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def main(argv: list[str]) -> None:
    kind, result_path, *rest = argv
    if kind == "jit-first-call":
        result = jit_first_call(rest[0])
    elif kind == "frozen-first-call":
        result = frozen_first_call(rest[0], rest[1])
    elif kind == "magic":
        result = magic(rest[0], int(rest[1]))
    elif kind == "moved":
        result = moved(rest[0], int(rest[1]))
    elif kind == "jaxviz":
        result = jaxviz_sizes(rest)
    else:
        raise SystemExit(f"unknown worker {kind!r}")
    with open(result_path, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1:])
