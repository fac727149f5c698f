"""Rows for ``%%compile`` under multi-controller JAX (issue 30): 2 processes against one.

Two local clusters of ipyparallel engines made by ``nbcompile.cluster``: two engines, each one
JAX process with one CPU device (the subject), and one engine, one JAX process with two CPU
devices (the anchor), so both compile the same global program: a data-parallel MLP train step
over the same 2-device mesh, the batch sharded on ``data`` (``make_array_from_process_local_
data``), the weights replicated. The same ``%%compile -f`` cell (``-f``: a real trace, lower and
XLA compile every time; JAX's persistent cache off on the engines; nbcompile's analysis cache
cleared) runs on every engine of one cluster at once, as under ``%%px``; each engine times its
own cell (``time.perf_counter`` around ``run_cell_magic``: the whole cell, the processes'
fingerprint exchange and the view's display included), and the subject is the slower of the
two processes; the CPU row is the same in each engine's process CPU time (all threads). Pairs alternate which cluster goes first; one unmeasured cell on each first.

The exchange row: after a ``jax.distributed`` barrier, both processes run the exchange of
``nbcompile.processes._agree`` (set this process's fingerprint in the key-value store, blocking
get of the other's) on the last cell's fingerprint; the slower process's seconds per exchange.
Engines are stopped whatever happens.
"""

from __future__ import annotations

import contextlib
import textwrap
from typing import Any

from benchmarks._stats import Row, ratio_at_most

__all__ = ["process_model", "process_rows"]

WAIT = 60.0  # seconds a process waits for the other at a %%compile (NBC801 after)

SETUP = """
import gc, time, socket
import jax, jax.numpy as jnp, numpy as np
import nbcompile
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
jax.config.update("jax_enable_compilation_cache", False)
mesh = Mesh(np.array(jax.devices()), ("data",))
_n, _me = jax.process_count(), jax.process_index()
_rng = np.random.default_rng(0)
_full = _rng.standard_normal(({batch}, {width}), dtype=np.float32)
_rows = {batch} // _n
batch = jax.make_array_from_process_local_data(
    NamedSharding(mesh, P("data")), _full[_me * _rows:(_me + 1) * _rows], ({batch}, {width}))
def _replicated(a):
    return jax.make_array_from_callback(a.shape, NamedSharding(mesh, P()), lambda i: a[i])
params = [
    {{"w": _replicated(_rng.standard_normal(({width}, {width}), dtype=np.float32) * 0.05),
      "b": _replicated(np.zeros(({width},), np.float32))}}
    for _ in range({layers})
]
"""

CELL = """
def train_step(params, batch):
    def loss(params):
        h = batch
        for p in params:
            h = jnp.tanh(h @ p["w"] + p["b"])
        return (h ** 2).mean()

    value, grads = jax.value_and_grad(loss)(params)
    return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), value

train_step(params, batch)
"""

#: one timed %%compile on an engine; the outcome in plain names the harness pulls
TIMED = """
from nbcompile.analysis import clear_analysis_cache
from nbcompile.report import forget_memos
clear_analysis_cache(); forget_memos(); gc.collect()
_t0, _c0 = time.perf_counter(), time.process_time()
get_ipython().run_cell_magic("compile", "-f", {cell!r})
_c = nbcompile.last()
_bench = {{"seconds": time.perf_counter() - _t0, "cpu_s": time.process_time() - _c0,
          "processes": len(_c.processes),
          "xla_compiles": _c.stages.xla_compiles,
          "agree_s": _c.timings.get("processes"), "compile_s": _c.timings.get("compile")}}
"""

#: the fingerprint exchange alone, after a barrier, ``rounds`` times
EXCHANGE = """
from nbcompile import _compat
from nbcompile.processes import _agree
_client = _compat.distributed_client()
_t0 = time.perf_counter()
_mine = {{**_agree.fingerprint(_c.stages, _c.source), "host": socket.gethostname(),
         "devices": [f"{{d.platform}}:{{d.id}}" for d in jax.local_devices()]}}
_fingerprint_s = time.perf_counter() - _t0
_exchange_s = []
for _k in range({rounds}):
    _client.wait_at_barrier(f"nbcompile-bench/barrier/{{_k}}", 60000)
    _t0 = time.perf_counter()
    _raw = _agree._exchange(
        _client, f"nbcompile-bench/exchange/{{_k}}", _agree._schema.encode("fingerprint", _mine),
        _n, 60.0)
    _payloads, _bad = _agree._schema.read_all(_raw, "fingerprint")  # every value checked
    assert not _bad, _bad
    _exchange_s.append(time.perf_counter() - _t0)
_bench = {{"fingerprint_s": _fingerprint_s, "exchange_s": _exchange_s}}
"""


def process_model(layers: int, width: int, batch: int) -> str:
    """The table's name for the program both clusters compile."""
    return f"MLP train {layers}x{width}, batch {batch}"


def _px(rc: Any, code: str, timeout: float) -> list[Any]:
    """Run ``code`` on every engine of ``rc`` at once; pull ``_bench`` from each."""
    rc[:].execute(textwrap.dedent(code), block=False).get(timeout=timeout)
    return rc[:].pull("_bench", block=False).get(timeout=60)


def _stop(rc: Any) -> None:
    with contextlib.suppress(Exception):
        rc.cluster.stop_cluster_sync()


def _pairs(
    two: Any, one: Any, pairs: int, layers: int, width: int, batch: int
) -> tuple[list[float], list[float], list[Any]]:
    setup = SETUP.format(batch=batch, width=width, layers=layers)
    timed = TIMED.format(cell=textwrap.dedent(CELL))
    for rc in (two, one):
        _px(rc, setup + "\n_bench = jax.device_count()", 300)
        _px(rc, timed, 600)  # warm-up, unmeasured: imports and first-use costs
    subject: list[float] = []
    anchor: list[float] = []
    runs: list[Any] = []
    for i in range(pairs):
        order = (two, one) if i % 2 == 0 else (one, two)
        got = {id(rc): _px(rc, timed, 600) for rc in order}
        subject.append(max(r["seconds"] for r in got[id(two)]))
        anchor.append(got[id(one)][0]["seconds"])
        runs.append({"two": got[id(two)], "one": got[id(one)]})
    return subject, anchor, runs


def process_rows(pairs: int, rounds: int, layers: int, width: int, batch: int) -> list[Row]:
    """``%%compile`` on 2 processes vs on 1 (same global program) and the exchange alone."""
    import nbcompile

    model = process_model(layers, width, batch)
    rows = [
        Row(
            "%%compile 2 processes",
            model,
            "s",
            "%%compile -f on 2 JAX processes (slower)",
            "the same on 1 process, 2 devices",
            # informative: on a 2-core machine the second engine waits for a core; the target
            # is the CPU row's (issue 39)
            note=f"{pairs} pairs; ipyparallel engines from nbcompile.cluster; each engine times "
            "its own cell (exchange and display included); same 2-device global program; wall "
            "time, informative (2 processes share the machine's cores; the CPU row is targeted)",
        ),
        Row(
            "%%compile 2 processes CPU",
            model,
            "s",
            "%%compile -f on 2 JAX processes (slower)",
            "the same on 1 process, 2 devices",
            target=ratio_at_most(1.3),
            note=f"{pairs} pairs; as the row above, in each engine's process CPU time (all "
            "threads), which waiting for a core (2 processes on one machine) does not inflate",
        ),
        Row(
            "fingerprint exchange",
            "2 processes",
            "s",
            "_agree._exchange after a barrier, with the versioned envelope written and every value checked (slower process)",
            None,
            note=f"{rounds} exchanges of the last cell's fingerprint through jax.distributed's "
            "key-value store",
        ),
    ]
    with contextlib.ExitStack() as stack:
        try:
            two = nbcompile.cluster(2, timeout=WAIT)
            stack.callback(_stop, two)
            one = nbcompile.cluster(1, devices_per_process=2, timeout=WAIT)
            stack.callback(_stop, one)
        except nbcompile.NbcompileError as err:
            for row in rows:
                row.note = f"not measured: the engines did not start ({err})"
            return rows
        try:
            subject, anchor, runs = _pairs(two, one, pairs, layers, width, batch)
            exchanged = _px(two, EXCHANGE.format(rounds=rounds), 300)
        except Exception as exc:  # an engine failed or timed out: say so (engines stopped)
            for row in rows:
                row.note = f"failed: {type(exc).__name__}: {str(exc).strip()[:200]}"
                row.failed = True
            return rows
    rows[0].set_pairs(subject, anchor)
    rows[0].extra["runs"] = runs
    # process CPU time (all threads) of the slower process / of the one process, per pair: what
    # the cells cost apart from waiting for a core (2 processes share the machine's cores)
    rows[1].set_pairs(
        [max(r["cpu_s"] for r in p["two"]) for p in runs], [p["one"][0]["cpu_s"] for p in runs]
    )
    rows[0].extra["processes_seen"] = sorted({r["processes"] for p in runs for r in p["two"]})
    per_round = [max(e["exchange_s"][k] for e in exchanged) for k in range(rounds)]
    rows[2].set_pairs(per_round)
    rows[2].extra["fingerprint_s"] = [e["fingerprint_s"] for e in exchanged]
    rows[2].extra["per_process_exchange_s"] = [e["exchange_s"] for e in exchanged]
    if any(r["xla_compiles"] < 1 for p in runs for side in p.values() for r in side):
        rows[0].note += "; WARNING: a cell did no XLA compile (a cache served it)"
    return rows
