"""``python -m benchmarks.scaling``: analysis time vs program size, 1k -> 10k kernels.

Compiles the picoGPT-style GPT-2 train step (benchmarks/_gpt2.py: d=768, 12 heads, a Python
loop over heads) with 3 to 27 layers, analyses each compiled program (best of ``--repeats``,
wall time and the analysing thread's CPU time), fits ``seconds = a * kernels^k`` (log-log least
squares) and writes the measured points to ``benchmarks/scaling.json`` and the plot to
``docs/img/analysis-scaling.svg`` (drawn here from those points: no plotting library needed).

    python -m benchmarks.scaling                  # ~10 min on 2 shared cores
    python -m benchmarks.scaling --plot-only      # redraw the SVG from scaling.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

HERE = Path(__file__).resolve().parent
DATA = HERE / "scaling.json"
PLOT = HERE.parent / "docs" / "img" / "analysis-scaling.svg"
LAYERS = (3, 6, 12, 18, 27)


def measure(layers: tuple[int, ...], repeats: int, log: Any = print) -> list[dict[str, Any]]:
    import jax

    from benchmarks._gpt2 import gpt2_train_step
    from nbcompile.analysis import Artifacts, analyse
    from nbcompile.capture.source import source_of_function

    jax.config.update("jax_enable_compilation_cache", False)
    points = []
    for n in layers:
        fn, args = gpt2_train_step(n_layer=n)
        t0 = time.perf_counter()
        traced = jax.jit(fn).trace(*args)
        lowered = traced.lower()
        compiled = lowered.compile()
        compile_s = time.perf_counter() - t0
        artifacts = Artifacts(
            closed_jaxpr=traced.jaxpr,
            lowered=lowered,
            compiled=compiled,
            hlo_text=compiled.as_text(),
            source=source_of_function(fn),
            name="train_step",
            fn=fn,
        )
        wall, cpu = math.inf, math.inf
        for _ in range(repeats):
            w0, c0 = time.perf_counter(), time.thread_time()
            analysis = analyse(artifacts)
            wall = min(wall, time.perf_counter() - w0)
            cpu = min(cpu, time.thread_time() - c0)
        point = {
            "layers": n,
            "kernels": analysis.counts["kernels"],
            "hlo_ops_after": analysis.counts["hlo_ops_after"],
            "jaxpr_eqns": analysis.counts["jaxpr_eqns"],
            "compile_s": round(compile_s, 3),
            "analysis_wall_s": round(wall, 4),
            "analysis_cpu_s": round(cpu, 4),
        }
        log(json.dumps(point), file=sys.stderr, flush=True)
        points.append(point)
        del artifacts, analysis, compiled, lowered, traced
    return points


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(a, k) of the least-squares line log y = log a + k log x."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    k = sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum(
        (a - mx) ** 2 for a in lx
    )
    return math.exp(my - k * mx), k


def svg(data: dict[str, Any]) -> str:
    """Analysis seconds (CPU and wall) against kernels, linear axes, with the fitted curves."""
    pts = data["points"]
    width, height, left, right, top, bottom = 640, 400, 64, 24, 40, 52
    xmax = max(p["kernels"] for p in pts) * 1.05
    ymax = max(max(p["analysis_wall_s"], p["analysis_cpu_s"]) for p in pts) * 1.15

    def x(v: float) -> float:
        return left + v / xmax * (width - left - right)

    def y(v: float) -> float:
        return height - bottom - v / ymax * (height - top - bottom)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="#fff"/>',
        f'<text x="{left}" y="22" font-size="14">nbcompile analysis time vs program size '
        f"(GPT-2 train step, picoGPT style)</text>",
    ]
    axis = "#444"
    out.append(f'<line x1="{left}" y1="{y(0)}" x2="{width - right}" y2="{y(0)}" stroke="{axis}"/>')
    out.append(f'<line x1="{left}" y1="{y(0)}" x2="{left}" y2="{top}" stroke="{axis}"/>')
    for k in range(0, int(xmax) + 1, 2000):
        out.append(
            f'<line x1="{x(k):.1f}" y1="{y(0)}" x2="{x(k):.1f}" y2="{y(0) + 4}" '
            f'stroke="{axis}"/><text x="{x(k):.1f}" y="{y(0) + 18}" '
            f'text-anchor="middle">{k:,}</text>'
        )
    step = 0.5 if ymax <= 5 else 1.0 if ymax <= 10 else 2.0
    v = 0.0
    while v <= ymax:
        out.append(
            f'<line x1="{left - 4}" y1="{y(v):.1f}" x2="{width - right}" y2="{y(v):.1f}" '
            f'stroke="#eee"/><text x="{left - 8}" y="{y(v) + 4:.1f}" '
            f'text-anchor="end">{v:g}</text>'
        )
        v += step
    out.append(
        f'<text x="{(left + width - right) / 2}" y="{height - 14}" text-anchor="middle">'
        "kernels in the compiled program</text>"
    )
    out.append(
        f'<text x="16" y="{(top + height - bottom) / 2}" text-anchor="middle" '
        f'transform="rotate(-90 16 {(top + height - bottom) / 2})">analysis seconds</text>'
    )
    for key, colour, label in (
        ("analysis_cpu_s", "#1f6fb4", "CPU time"),
        ("analysis_wall_s", "#d9822b", "wall time"),
    ):
        a, k = data["fit"][key]
        curve = " ".join(f"{x(kk):.1f},{y(a * kk**k):.1f}" for kk in range(800, int(xmax), 100))
        out.append(
            f'<polyline points="{curve}" fill="none" stroke="{colour}" '
            f'stroke-width="1.5" stroke-dasharray="4 3"/>'
        )
        for p in pts:
            out.append(
                f'<circle cx="{x(p["kernels"]):.1f}" cy="{y(p[key]):.1f}" r="4" fill="{colour}"/>'
            )
        row = 0 if key == "analysis_cpu_s" else 1
        out.append(
            f'<circle cx="{left + 16}" cy="{top + 12 + 18 * row}" r="4" fill="{colour}"/>'
            f'<text x="{left + 26}" y="{top + 16 + 18 * row}">{label}: fitted exponent '
            f"{k:.2f} (seconds ∝ kernels^{k:.2f})</text>"
        )
    out.append(
        f'<text x="{width - right}" y="{height - 2}" text-anchor="end" font-size="10" '
        f'fill="#666">{data["date"]} · {data["machine"]} · best of '
        f"{data['repeats']}</text>"
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.scaling", description=__doc__.split("\n")[0]
    )
    p.add_argument("--layers", default=",".join(map(str, LAYERS)))
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--plot-only", action="store_true", help="redraw the SVG from scaling.json")
    args = p.parse_args(argv)
    if args.plot_only:
        data = json.loads(DATA.read_text())
    else:
        layers = tuple(int(n) for n in args.layers.split(","))
        points = measure(layers, args.repeats)
        import platform

        data = {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared), load "
            f"{os.getloadavg()[0]:.1f}",
            "repeats": args.repeats,
            "points": points,
        }
        data["fit"] = {
            key: list(fit([q["kernels"] for q in points], [q[key] for q in points]))
            for key in ("analysis_cpu_s", "analysis_wall_s")
        }
        DATA.write_text(json.dumps(data, indent=1) + "\n")
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    PLOT.write_text(svg(data))
    for key, (_, k) in data["fit"].items():
        print(f"{key}: seconds ∝ kernels^{k:.3f}")
    print(f"written: {DATA} and {PLOT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
