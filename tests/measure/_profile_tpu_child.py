"""Child process: the profile of a deviceless TPU compile (an estimate), then a CPU profile in
the same process, which must be measured (nbcompile loads libtpu without its profiler, which
would crash JAX's profiler without a TPU). Prints one JSON line."""

from __future__ import annotations

import json

import jax.numpy as jnp

import nbcompile
from benchmarks.models import attention_block
from nbcompile.errors import NbcompileError
from nbcompile.measure import profile

fn, args = attention_block(seq=128, d=128)
cpu = nbcompile.compile(fn, *args)
before = profile(cpu, calls=2, roofline=False).source  # fine before any TPU compile
tpu = nbcompile.compile(fn, *args, backend="tpu", topology="v5e:1x1")
p = profile(tpu)
peaks = p.peaks
out = {
    "before": before,
    "source": p.source,
    "coverage": p.coverage,
    "step": p.step_seconds,
    "optimal_seconds": tpu.cost["optimal_seconds"],
    "device": peaks.device,
    "peak_sources": [peaks.flops_per_s.source, peaks.bytes_per_s.source],
    "kernels": [[k.flops, k.bytes, k.seconds, k.achieved_flops_per_s, k.bound] for k in p.kernels],
    "peaks": [peaks.flops_per_s.value, peaks.bytes_per_s.value],
    "json_sources": p.to_json()["sources"],
    "text": p.text(),
}
try:
    profile(nbcompile.compile(lambda x: jnp.tanh(x), jnp.ones(8)), calls=1)
    out["after"] = "measured"
except NbcompileError as err:
    out["after"] = [err.code, str(err)]
print(json.dumps(out))
