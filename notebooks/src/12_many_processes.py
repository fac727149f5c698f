# %% md
# # 12 · Many processes, one program
#
# **You will learn** to compile one program on several JAX processes at once — the way a model
# too big for one machine runs, one process per host — with `%%compile` under ipyparallel's
# `%%px`; to see which collectives cross from one process to another and how many bytes they
# move; how nbcompile stops a program that differs on one process before it can hang; and to
# read every process's profile side by side, to find the process the others wait for.
#
# Two local processes stand in for two hosts here: `nbcompile.cluster(2)` starts two
# ipyparallel engines, each one JAX process with one CPU device, joined by
# `jax.distributed` (gloo collectives on localhost).

# %% code
import nbcompile

rc = nbcompile.cluster(2)
print(f"engines {sorted(rc.ids)}")

# %% md
# ## A global batch across the processes
# Every `%%px` cell runs on both engines. Each process loads only its own rows of the batch;
# `jax.make_array_from_process_local_data` joins them into one global array, sharded along the
# `data` axis of a mesh whose devices belong to different processes. The parameters are
# replicated: every process holds all of them.

# %% code
%%px
import jax, jax.numpy as jnp, numpy as np
import nbcompile
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

D, HIDDEN, ROWS = 128, 256, 8192  # ROWS: this process's share of the batch
mesh = Mesh(np.array(jax.devices()), ("data",))
rows, replicated = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
rng = np.random.default_rng(jax.process_index())  # every process reads other data
x_local = rng.normal(size=(ROWS, D)).astype(np.float32)
y_local = np.tanh(x_local[:, :1]).astype(np.float32)
x = jax.make_array_from_process_local_data(rows, x_local)
y = jax.make_array_from_process_local_data(rows, y_local)
init = np.random.default_rng(0)  # the same parameters on every process
params = {
    "w1": jax.device_put((init.normal(size=(D, HIDDEN)) / np.sqrt(D)).astype(np.float32), replicated),
    "w2": jax.device_put(np.zeros((HIDDEN, 1), np.float32), replicated),
}
print(f"process {jax.process_index()} of {jax.process_count()}: holds {x_local.shape[0]} rows "
      f"of the global batch {x.shape}; devices {[d.process_index for d in jax.devices()]}")

# %% md
# ## A data-parallel train step
# The same `%%compile` cell on every process: each traces, lowers and compiles the step and
# binds `train_step` to it. Before anything is bound, the processes compare fingerprints of
# their programs through `jax.distributed`'s key-value store. The view appears once, from
# process 0; process 1 prints one line.

# %% code
%%px
%%compile
def loss_fn(params, x, y):
    h = jnp.tanh(x @ params["w1"])
    return ((h @ params["w2"] - y) ** 2).mean()

def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), loss

train_step(params, x, y)

# %% md
# **Which collectives cross processes.** The loss is a mean over the whole global batch, so
# each process's gradient must be summed with the other's: XLA inserts an `all-reduce` whose
# devices belong to both processes (`crosses_processes`). Its bytes per device are the
# gradients: every parameter travels on every step.

# %% code
%%px
c = train_step.compilation
crossing = [(k.op, k.bytes) for k in c.collectives if k.crosses_processes]
raw_allreduces = c.compiled.as_text().count(" all-reduce(")  # JAX's Compiled: its HLO text
param_bytes = sum(p.nbytes for p in jax.tree.leaves(params))
procs = [(p.index, p.host, p.devices) for p in c.processes]

# %% md
# **Predict first.** How many bytes does the all-reduce move per device, from the shapes of
# `w1` (shape `(128, 256)`) and `w2` (shape `(256, 1)`), float32? The step also returns the loss, a mean over
# the global batch. The hidden cell checks your count against the compiled program.

# %% code
crossing_0, param_bytes_0, procs, raw_0 = rc[0].pull(("crossing", "param_bytes", "procs", "raw_allreduces"), block=True)
for op, nbytes in crossing_0:
    print(f"{op}: {nbytes:,} bytes per device, across processes")
print(f"parameters: {param_bytes_0:,} bytes")
for index, host, devices in procs:
    print(f"process {index} on {host}: {', '.join(devices)}")

# %% code
assert len(procs) == 2 and crossing_0 and all(op == "all-reduce" for op, _ in crossing_0)
assert raw_0 == len(crossing_0)   # as many as the compiled program's text holds

# %% code hide
predicted = 4 * (128 * 256 + 256 * 1) + 4   # every gradient, and the loss's partial sum
print(f"answer: 4 × ({128 * 256} + {256}) + 4 = {predicted:,} bytes: each process sums its "
      f"gradients over its half of the batch and the all-reduce adds the two, with the loss; "
      f"XLA's all-reduce moves {sum(b for _, b in crossing_0):,}")
assert sum(b for _, b in crossing_0) == predicted == param_bytes_0 + 4  # claim: allreduce-is-the-gradient

# %% md
# A few steps: each process runs the compiled step on the global batch and gets the same loss.

# %% code
%%px
losses = []
for _ in range(5):
    params, loss = train_step(params, x, y)
    losses.append(float(loss))

# %% code
losses_0, losses_1 = rc[:].pull("losses", block=True)
print("process 0: " + ", ".join(f"{v:.4f}" for v in losses_0))
print("process 1: " + ", ".join(f"{v:.4f}" for v in losses_1))
assert losses_0 == losses_1 and losses_0[-1] < losses_0[0]

# %% md
# ## A program that differs on one process
# A branch on `jax.process_index()` inside the function makes process 1 trace another program.
# Run as it is, each process would wait at the first collective for a partner running
# something else: a hang with no message. `%%compile` compares the programs first and raises
# `NBC800` on every process, naming the first cell line whose program differs. (Here the cell
# is run from Python to keep the error as a value; under `%%px` it stops the cell on every
# engine.)

# %% code
%%px
RANK_BUG = """
def rank_step(params, x, y):
    if jax.process_index() == 1: x = x * 2.0
    return jax.value_and_grad(loss_fn)(params, x, y)

rank_step(params, x, y)
"""
try:
    get_ipython().run_cell_magic("compile", "", RANK_BUG)
    caught = None
except nbcompile.NbcompileError as err:
    caught = (err.code, err.line, str(err))
    print(f"process {jax.process_index()}: {err}")

# %% code
caught_0, caught_1 = rc[:].pull("caught", block=True)
assert caught_0 and caught_1 and caught_0[0] == caught_1[0] == "NBC800" and caught_0[1] == caught_1[1] == 4  # claim: nbc800-before-a-hang
assert "process 1" in caught_0[2] and "x = x * 2.0" in caught_0[2]

# %% md
# ## Every process's profile, side by side
# Each process profiles its own calls — `%%compile --profile 10` under `%%px` compiles and then
# profiles; for a step compiled already, `c.run_profile(10)` on every process is the same
# measurement — and afterwards they exchange their per-kernel medians through the same
# key-value store: `c.profile.processes` holds them side by side. To see what that shows, a
# thread on process 1 does other work while the step is profiled: it sorts a Python list over
# and over, as a data loader written in Python might. `sorted` is one call into C that holds the
# process's GIL (the interpreter lock) from start to end, so process 1's main thread waits for
# the lock each time it needs it — to dispatch a step or to take one's result. Process 0 runs
# no such thread. (Numpy matrix products would not do: they release the GIL, and OpenBLAS
# spreads them over every core, slowing both processes.) The thread runs only while the
# profile is measured: everything else the GIL would slow down too.

# %% code
%%px
import threading

stop = threading.Event()

def busy():
    data = np.random.default_rng(0).random(150_000).tolist()
    while not stop.is_set():
        sorted(data)  # holds the GIL until it returns

BUSY = 1  # the process whose thread does other work
c = train_step.compilation  # the step compiled above
if jax.process_index() == BUSY:
    threading.Thread(target=busy, daemon=True).start()
try:
    c.run_profile(10)  # what %%compile --profile 10 runs once compiled: 10 calls, every process
finally:
    stop.set()
side = c.profile.processes

# %% code
side = rc[0]["side"]
print(side.text())

# %% md
# Each call ends together on both processes (the all-reduce joins them), so their steps take
# about the same time. Where the time goes differs: process 1 starts each step late, after its
# main thread has won the GIL back from the sorting thread, so process 0 reaches the all-reduce first
# and waits there for process 1. The waiting is what shows: process 0's time inside the
# all-reduce is the longer, and process 1 is the one the other waits for (`side.slowest`). The
# kernels themselves run in XLA's threads, which need no GIL, but the sorting thread also takes a
# core from them: process 1's own-kernel time, printed beside the waiting, may be longer too, by
# as much as whatever else shares the machine allows. The claim is the waiting, not the kernels.

# %% code
own = [p.own_seconds for p in side.processes]
waiting = [p.collective_seconds for p in side.processes]
print(f"own kernels: {own[0] * 1e3:.1f} ms on process 0, {own[1] * 1e3:.1f} ms on process 1; "
      f"in the all-reduce: {waiting[0] * 1e3:.1f} ms and {waiting[1] * 1e3:.1f} ms "
      f"(process 0 waits {(waiting[0] - waiting[1]) * 1e3:.1f} ms longer per step)")
assert side.slowest == 1 and waiting[0] > waiting[1], (own, waiting)  # claim: others-wait-for-the-busy-one

# %% md
# ## Shut the processes down

# %% code
rc.shutdown(targets="all", block=True)  # the engines end their JAX processes
rc.cluster.stop_cluster_sync()  # and the controller

# %% md
# ## What you saw
# - `nbcompile.cluster(2)` started two JAX processes; `%%px` with `%%compile` compiled one
#   data-parallel step on both, on a global batch of which each process held half.
# - `c.collectives` showed the gradient all-reduce crossing the processes, moving every
#   parameter's bytes each step; `c.processes` listed the processes and their devices.
# - A branch on `jax.process_index()` gave process 1 another program; both processes raised
#   `NBC800` naming that line before anything ran, instead of hanging at the all-reduce.
# - `c.run_profile(10)` (what `--profile` runs) measured every process: `c.profile.processes` showed the other process waiting
#   for the busy one in the all-reduce: a Python thread holding process 1's GIL delays each
#   step there, and the delay shows as process 0's waiting, not in process 1's kernels.
# - On real hosts the same cells run on one engine per host (`docs/processes.md`).
