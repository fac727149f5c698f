"""`make gpu-check`: on a machine with an NVIDIA GPU, check nbcompile's GPU targets for real.

Prints the GPU, its real XLA target description next to nbcompile's (docs/targets.md), then
compiles and runs two small tutorial-style models (an MLP and an attention block), times the
compiled calls, and compares the real compile's kernels with a deviceless compile for the
matching nbcompile target (H200/H100/...), and profiles both models with ``--profile`` (kernel
events read from the GPU's device plane; scripts/_gpu_profile.py), and compares the memory map's
peak with ``memory_stats()["peak_bytes_in_use"]`` after one call (scripts/_gpu_memory.py).
Output is markdown tables.
A few minutes at most; never run in CI. On a machine without a GPU it prints "no GPU" and exits 0.

    .venv/bin/python scripts/gpu_check.py [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

FIELDS = (
    "core_count",
    "clock_rate_ghz",
    "memory_bandwidth",
    "l2_cache_size",
    "device_memory_size",
    "shared_memory_per_core",
    "shared_memory_per_block_optin",
    "major",
    "minor",
)


def models(scale: int = 1) -> dict[str, tuple[Callable[..., Any], tuple[Any, ...]]]:
    """Two small models and example arguments (``scale`` shrinks them for the CPU test)."""
    import jax
    import jax.numpy as jnp

    keys = jax.random.split(jax.random.key(0), 8)
    d, hidden, batch, seq, heads = 1024 // scale, 4096 // scale, 256 // scale, 512 // scale, 8

    def mlp(params, x):
        h = jax.nn.gelu(x @ params["w1"] + params["b1"])
        return jnp.mean((h @ params["w2"]) ** 2)

    def attention(params, x):
        q, k, v = (x @ params[n] for n in ("wq", "wk", "wv"))
        split = lambda t: t.reshape(seq, heads, d // heads).transpose(1, 0, 2)  # noqa: E731
        q, k, v = split(q), split(k), split(v)
        weights = jax.nn.softmax(q @ k.transpose(0, 2, 1) / jnp.sqrt(float(d // heads)), axis=-1)
        out = (weights @ v).transpose(1, 0, 2).reshape(seq, d) @ params["wo"]
        mu = out.mean(-1, keepdims=True)
        return (out - mu) / jnp.sqrt(((out - mu) ** 2).mean(-1, keepdims=True) + 1e-5) + x

    normal = lambda k, *s: jax.random.normal(k, s, jnp.float32) * 0.02  # noqa: E731
    mlp_params = {
        "w1": normal(keys[0], d, hidden),
        "b1": jnp.zeros((1, hidden)),
        "w2": normal(keys[1], hidden, d),
    }
    att_params = {n: normal(keys[2 + i], d, d) for i, n in enumerate(("wq", "wk", "wv", "wo"))}
    return {
        "mlp": (mlp, (mlp_params, normal(keys[6], batch, d))),
        "attention": (attention, (att_params, normal(keys[7], seq, d))),
    }


def time_calls(fn: Callable[..., Any], args: tuple[Any, ...], repeats: int = 20) -> float:
    """Median seconds of a compiled call (after one warm-up call)."""
    import jax

    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def check_models(deviceless: str | None, scale: int = 1, repeats: int = 20) -> list[dict[str, Any]]:
    """Compile and run each model here; also compile it deviceless for ``deviceless``."""
    import jax

    import nbcompile
    from nbcompile.targets import hlo_summary

    rows = []
    for name, (fn, args) in models(scale).items():
        tc = nbcompile.compile(fn, *args)
        summary = hlo_summary(tc.hlo)
        row = {
            "model": name,
            "backend": jax.default_backend(),
            "kernels": summary["kernels"],
            "fusions": summary["fusions"],
            "custom_calls": summary["custom_calls"],
            "compile_s": tc.timings["compile"],
            "run_ms": time_calls(tc.fn, args, repeats) * 1e3,
        }
        if deviceless:
            try:
                other = nbcompile.compile(fn, *args, backend="gpu", gpu=deviceless)
                theirs = hlo_summary(other.hlo) if other.hlo else None
                row["deviceless"] = deviceless
                row["deviceless_kernels"] = theirs["kernels"] if theirs else None
                row["deviceless_fusions"] = theirs["fusions"] if theirs else None
                row["deviceless_note"] = other.target.note
            except Exception as err:  # report, never stop the check
                row["deviceless_error"] = f"{type(err).__name__}: {str(err).splitlines()[0]}"
        rows.append(row)
    return rows


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The rows as a GitHub markdown table."""
    head = [
        "model",
        "backend",
        "kernels",
        "fusions",
        "custom calls",
        "compile s",
        "run ms",
        "deviceless target",
        "deviceless kernels",
        "deviceless fusions",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [
            r["model"],
            r["backend"],
            r["kernels"],
            r["fusions"],
            r["custom_calls"],
            f"{r['compile_s']:.3f}",
            f"{r['run_ms']:.3f}",
            r.get("deviceless", "—"),
            r.get("deviceless_kernels", r.get("deviceless_error", "—")),
            r.get("deviceless_fusions", "—"),
        ]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def config_fields(text: str) -> dict[str, str]:
    """The numeric fields of a GpuTargetConfigProto text that nbcompile's targets set."""
    return {k: v for k, v in re.findall(r"(\w+):\s*([\d.e+]+)", text) if k in FIELDS}


def matching_target(kind: str) -> str | None:
    """nbcompile's GPU target for a device kind such as ``NVIDIA H200``."""
    from nbcompile.targets import GPU_TARGETS

    lowered = kind.lower()
    return next((name for name in GPU_TARGETS if name in lowered), None)


def real_target_config() -> str | None:
    """The XLA target description of the GPU here, or None where this JAX cannot say."""
    import jax

    try:
        from jax.lib import xla_client

        return xla_client.get_topology_for_devices(jax.devices()).target_config
    except Exception:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the results to this JSON file")
    options = parser.parse_args(argv)
    import jax

    if jax.default_backend() != "gpu":
        print(f"no GPU: JAX's backend is {jax.default_backend()!r}; nothing to check")
        return 0
    from nbcompile.targets import gpu_target_config

    devices = jax.devices()
    print("devices:", devices)
    kind = devices[0].device_kind
    ours = matching_target(kind) or "h100"
    print(f"device kind: {kind!r} -> nbcompile target {ours!r}")
    real = real_target_config()
    if real:
        mine, theirs = config_fields(gpu_target_config(ours)), config_fields(real)
        print(f"\n| field | this GPU | nbcompile {ours} |\n|---|---|---|")
        for key in FIELDS:
            print(f"| {key} | {theirs.get(key, '—')} | {mine.get(key, '—')} |")
    else:
        print("(this JAX does not expose the device's target config)")
    from scripts._gpu_memory import memory_rows, memory_table

    # first, while the process peak is still low: the map's peak vs the allocator's
    memory = memory_rows(models())
    print("\n--memory (one call each):\n" + memory_table(memory))
    rows = check_models(ours)
    print()
    print(markdown_table(rows))
    from scripts._gpu_profile import profile_models, profile_table

    profiled = profile_models(models())  # --profile: kernel events from the device plane
    print("\n--profile (10 calls each):\n" + profile_table(profiled))
    if not all(r["device_plane"] for r in profiled):
        print("WARNING: --profile found no device-plane kernel events on this GPU")
    if options.json:
        Path(options.json).write_text(
            json.dumps(
                {
                    "kind": kind,
                    "target_config": real,
                    "rows": rows,
                    "profile": profiled,
                    "memory": memory,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
