# %% md
# # 13 · Inside the loop
#
# **You will learn** what XLA makes of a loop over layers (`jax.lax.scan` over stacked
# weights): one compiled body run once per layer. You will find the loop in `c.loops`, measure
# where the time of each iteration goes with `%%compile --profile`, see which layer is slow,
# and predict, then measure, what `unroll=` changes.

# %% code
%load_ext nbcompile
import statistics
import jax, jax.numpy as jnp, numpy as np
import nbcompile

LAYERS, D, BATCH = 8, 256, 256
keys = iter(jax.random.split(jax.random.key(0), 8))
# the weights of all layers stacked: one array per parameter, layer index first
stack = {"w": jax.random.normal(next(keys), (LAYERS, D, D)) / np.sqrt(D),
         "v": jax.random.normal(next(keys), (LAYERS, D, D)) / np.sqrt(D)}
x = jax.random.normal(next(keys), (BATCH, D))

# %% md
# ## A loop over layers
# Every fourth layer is a *wide* one: besides its own matrix product it mixes the activations
# through eight more. `lax.cond` picks the branch per layer at run time, and `lax.scan` runs the
# layer over the stacked weights: JAX traces the body once, whatever the number of layers.

# %% code
%%compile --profile 10
def layer(h, p, i):
    def wide(h):
        for _ in range(8):
            h = jnp.tanh(h @ p["v"])
        return h
    h = jnp.tanh(h @ p["w"])
    return jax.lax.cond(i % 4 == 3, wide, lambda h: h, h)
def forward(stack, x):
    def body(h, step):
        p, i = step
        return layer(h, p, i), None
    h, _ = jax.lax.scan(body, x, (stack, jnp.arange(LAYERS)))
    return h
forward(stack, x)

# %% md
# `c.loops` lists every loop of the program: the function you called, the line that called it
# (counting the `%%compile` line as line 1), how many times it runs, and the kernels XLA made of
# one iteration. `changes` says what XLA did to the loop.

# %% code
c = forward.compilation
(loop,) = c.loops
print(loop.label, "| XLA while:", loop.whiles, "| kernels per iteration:", len(loop.every_iteration))
for change in loop.changes:
    print(" -", change)
scan_line = next(n for n, t in enumerate(c.source.lines, start=1) if "lax.scan" in t)
assert (loop.kind, loop.trip_count, loop.line) == ("scan", LAYERS, scan_line)

# %% md
# **Prediction: XLA compiled the body once and runs it once per layer.** Then every kernel of
# the body's own (not of a branch) runs exactly `LAYERS` times per call, and the wide branch's
# kernels run only on the wide layers.

# %% code
p = c.profile
counts = {k.name: k.count for k in p.kernels}
own = [k for k in loop.every_iteration if k in counts]
print({k: counts[k] for k in own})
assert own and all(counts[k] == LAYERS for k in own)  # claim: body-once-per-layer
(t,) = p.loops
wide_layers = [i for i in range(LAYERS) if i % 4 == 3]
branch = [k for k, per in t.by_kernel.items()
          if all(per[i] > 0 for i in wide_layers) and not any(per[i] for i in range(LAYERS) if i not in wide_layers)]
print("kernels of the wide branch only:", branch)
assert branch

# %% md
# ## Where the time of each iteration goes
# **Prediction from the flops.** A narrow layer is one `BATCH × D × D` matrix product, a wide
# one nine: a wide iteration should take about nine times a narrow one (the element-wise `tanh`
# and the loop's own bookkeeping are small beside a 256-wide matrix product). XLA's cost model
# gives the flops of each kernel; here they are added up per branch.

# %% code
kernel_flops = {k.name: (k.flops or 0.0) / max(k.count, 1) for k in p.kernels}
narrow_flops = sum(kernel_flops.get(k, 0.0) for k in loop.every_iteration)
wide_flops = narrow_flops + sum(kernel_flops.get(k, 0.0) for k in branch)
predicted = wide_flops / narrow_flops
print(f"flops per iteration: narrow {narrow_flops:.3g}, wide {wide_flops:.3g}: predicted ratio {predicted:.1f}")
assert 8 < predicted < 10

# %% md
# **Measured.** `c.profile.loops[0].iterations` holds the seconds of each iteration (the mean
# over the profiled calls), read from the profiler's events: XLA:CPU records every kernel of the
# body each time it runs, and an iteration lasts from its first kernel to the next iteration's,
# so the iterations add up to the loop's measured total. The wide layers must be the slow ones,
# and by at least about the predicted factor: the flops are a floor (a matrix product inside a
# branch need not run at the rate of the one outside, and a busy machine slows some iterations).

# %% code
print(p.text(top=5))
narrow = [t.iterations[i] for i in range(LAYERS) if i not in wide_layers]
wide = [t.iterations[i] for i in wide_layers]
measured = statistics.median(wide) / statistics.median(narrow)
print(f"median iteration: narrow {statistics.median(narrow) * 1e3:.2f} ms, wide {statistics.median(wide) * 1e3:.2f} ms: "
      f"measured ratio {measured:.1f} (predicted {predicted:.1f})")
slowest = sorted(range(LAYERS), key=t.iterations.__getitem__)[-len(wide_layers):]
assert sorted(slowest) == wide_layers
assert min(wide) > 2 * statistics.median(narrow) and measured > predicted / 2  # claim: wide-layers-slow
assert abs(t.iteration_seconds / t.total_seconds - 1) < 0.1

# %% md
# The body calls your function `layer`, so `by_function` also gives one row per layer:
# `layer[k]` is the time of layer k (its share of the kernels of iteration k).

# %% code
rows = {k: v for k, v in p.by_function.items() if k.startswith("layer[")}
for k in sorted(rows, key=lambda k: int(k[6:-1])):
    print(f"{k:>9} {rows[k] * 1e3:6.2f} ms {'█' * round(30 * rows[k] / max(rows.values()))}")
assert set(rows) == {f"layer[{i}]" for i in range(LAYERS)}
narrow_rows = [rows[f"layer[{i}]"] for i in range(LAYERS) if i not in wide_layers]
assert min(rows[f"layer[{i}]"] for i in wide_layers) > 2 * statistics.median(narrow_rows)

# %% md
# ## What `unroll=` changes
# `lax.scan(..., unroll=k)` asks JAX to put `k` copies of the body in each iteration of the
# loop XLA gets. **Prediction:** XLA's loop then runs `LAYERS / k` times, each of its
# iterations runs the body's own kernels `k` times, and with `unroll=True` no loop is left at
# all: every layer's kernels are laid out one after another. The arithmetic is the same —
# but XLA's cost analysis (`c.cost`) counts a loop's body **once**, not once per iteration, so
# its flops should grow with `k` until, fully unrolled, they are the program's true count:
# `flops(unroll=k) × LAYERS / k` is the same for every `k`.

# %% code
def forward_unrolled(stack, x, k):
    def body(h, step):
        p, i = step
        return layer(h, p, i), None
    return jax.lax.scan(body, x, (stack, jnp.arange(LAYERS)), unroll=k)[0]

# %% code
runs = {}  # by unroll: 1, 2, 4 and "full" (unroll=True; a dict would take True for 1)
for k in (1, 2, 4, "full"):
    ck = nbcompile.compile(lambda s, x: forward_unrolled(s, x, True if k == "full" else k), stack, x)
    (lk,) = ck.loops
    runs[k] = (ck, lk)
    print(f"unroll={k!s:>4}: XLA trip count {lk.xla_trip_count}, while loops {lk.whiles}, "
          f"kernels {ck.summary()['kernels']}, flops {ck.cost['flops']:.3g}")
for k in (2, 4):
    assert runs[k][1].xla_trip_count == LAYERS // k  # claim: unroll-divides-trips
    assert len(runs[k][1].every_iteration) > len(runs[1][1].every_iteration)
assert runs["full"][1].whiles == [] and "unrolled by JAX" in runs["full"][1].changes[0]
true_flops = runs["full"][0].cost["flops"]
for k in (1, 2, 4):
    assert abs(runs[k][0].cost["flops"] * (LAYERS // k) / true_flops - 1) < 0.01
# the same figure from JAX itself: jit, lower, compile, and XLA's cost analysis
raw = jax.jit(lambda s, x: forward_unrolled(s, x, 2)).lower(stack, x).compile().cost_analysis()
print(f"jax.jit(...unroll=2).lower(stack, x).compile().cost_analysis()['flops']: {raw['flops']:.3g}")
assert raw["flops"] == runs[2][0].cost["flops"]
counted = ", ".join(f"{runs[k][0].cost['flops'] * (LAYERS // k):.3g}" for k in (1, 2, 4))
print(f"XLA's flops × XLA's trip count: {counted}; fully unrolled: {true_flops:.3g}")

# %% md
# **Predict first.** Profiled, how many iterations will the loop of `unroll=4` show, and how
# many times per call will each kernel of the body's own run (with `unroll=1` it was `LAYERS`)?
# Write your answer down, then run the hidden cell.

# %% code hide
from nbcompile.measure import profile
p4 = profile(runs[4][0], calls=3)
counts4 = {k.name: k.count for k in p4.kernels}
body4 = [k for k in runs[4][1].every_iteration if k in counts4]
print(f"unroll=4: {len(p4.loops[0].iterations)} iterations measured; the loop's kernels ran",
      sorted({counts4[k] for k in body4}), "times per call")
assert len(p4.loops[0].iterations) == LAYERS // 4

# %% md
# **Measured:** profiled, the unrolled loop has fewer, longer iterations (one per `k` layers);
# fully unrolled, there are no iterations to see, only the kernels of every layer, and the
# profile says so.

# %% code
from nbcompile.measure import profile
for k in (2, "full"):
    (tk,) = profile(runs[k][0], calls=5).loops
    print(f"unroll={k!s:>4}: {len(tk.iterations)} iterations measured; {tk.note or ''}")
    if k == "full":
        assert tk.iterations == [] and "no per-iteration events" in tk.note
    else:
        assert len(tk.iterations) == LAYERS // k

# %% md
# ## Where the memory of each iteration goes
# Differentiate the stack: `--grad` also compiles `value_and_grad` of the loss, and `--memory`
# maps its memory step by step. **The prediction:** the forward scan keeps, for every layer, what
# the backward pass will need of it (its *residuals*: each matrix product's input and each
# `tanh` output, `BATCH × D` floats each), writing one layer's worth per iteration into buffers
# XLA allocates whole before the loop; the backward scan runs the layers in reverse and reads
# them back one layer per iteration. So through the forward loop the bytes holding residuals
# grow by one layer's worth per iteration, through the backward loop they shrink the same way,
# and the stack holds all of them when the backward starts. (The loop itself is run out
# iteration by iteration; the `lax.cond` inside it is counted at its larger branch, so the
# peak is labelled an estimate.)

# %% code
%%compile --grad --memory
def loss(stack, x):
    return jnp.mean(forward(stack, x) ** 2)
loss(stack, x)

# %% code
g = loss.compilation
m = g.memory_map
fwd_loop, bwd_loop = g.grad.loops
print(fwd_loop.label, "|", bwd_loop.label)
first = {}  # (loop, iteration) -> the first step of that iteration
for s in m.steps:
    if s.get("loop"):
        first.setdefault((s["loop"], s["iteration"]), s)
written = [first[(fwd_loop.whiles[0], k)]["written"] for k in range(LAYERS)]
unread = [first[(bwd_loop.whiles[0], k)]["unread"] for k in range(LAYERS)]
print("written after each forward iteration (KB):", [w // 1024 for w in written])
print("still to read at each backward iteration (KB):", [u // 1024 for u in unread])
print(m.text(top=3))
assert bwd_loop.reverse and m.peak_source == "estimate" and "branch" in m.notes[-1]
assert all(b > a for a, b in zip(written, written[1:])) and all(b < a for a, b in zip(unread, unread[1:]))
assert written[-1] == unread[0]
# JAX's own buffer assignment of the same gradient program: the residual stacks are among its
# temporaries (jax.jit(...).lower(...).compile().memory_analysis())
raw_mem = jax.jit(jax.value_and_grad(g.original)).lower(stack, x).compile().memory_analysis()
print(f"memory_analysis(): temporaries {raw_mem.temp_size_in_bytes / 2**20:.2f} MiB, "
      f"residual stacks {written[-1] / 2**20:.2f} MiB")
assert raw_mem.temp_size_in_bytes >= written[-1]

# %% md
# **How much per layer?** A narrow layer keeps two `BATCH × D` float32 arrays (its matrix
# product's input and its `tanh` output), a wide one two more per extra matrix product. But a
# scan stacks *one* shape per iteration: a `lax.cond` inside it keeps what either branch
# needs, in every iteration. So the prediction is at least the wide layers' residuals for
# *every* layer (JAX's version decides which other intermediates it keeps besides), not the
# average of two wide and six narrow layers.

# %% code
per_layer = written[0]
array = BATCH * D * 4
predicted_layer = (2 + 2 * 8) * array
average = (2 * LAYERS + 16 * sum(i % 4 == 3 for i in range(LAYERS))) * array / LAYERS
print(f"one layer's residuals: {per_layer / 1024:.0f} KB = {per_layer / array:.0f} arrays of {array / 1024:.0f} KB "
      f"(predicted at least {predicted_layer / 1024:.0f} KB; the average layer would need {average / 1024:.0f} KB); "
      f"all of them: {written[-1] / 2**20:.2f} MiB")
assert predicted_layer <= per_layer < 2 * predicted_layer and written[-1] == LAYERS * per_layer  # claim: cond-keeps-wide-residuals

# %% md
# ## In the picture
# The view draws the loop as one group, `scan × 8 · line …`, with its body inside and, after
# `--profile`, one bar per iteration along its bottom edge: hover a bar for the iteration's
# time and its slowest kernels. With `--grad`, the Gradient tab draws the scan's backward pass
# (a reverse scan) beside its forward.

# %% code
c
