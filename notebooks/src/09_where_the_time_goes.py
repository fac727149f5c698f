# %% md
# # 09 · Where the time goes
#
# **You will learn** to measure where a compiled model spends its time — per kernel, per line of
# your cell and per module — with `%%compile --profile`; to read a roofline (is a kernel held
# back by arithmetic or by memory?); and to measure, kernel by kernel, what operator fusion
# saves in bytes moved and in time.

# %% code
%load_ext nbcompile
import time
import jax, jax.numpy as jnp, numpy as np
import nbcompile
from nbcompile.measure import profile, variants_for

D, SEQ, HEADS = 512, 256, 8
keys = iter(jax.random.split(jax.random.key(0), 8))

def dense(n_in, n_out):
    return jax.random.normal(next(keys), (n_in, n_out)) / np.sqrt(n_in)

params = {"wqkv": dense(D, 3 * D), "wo": dense(D, D), "w1": dense(D, 4 * D),
          "w2": dense(4 * D, D), "ln1": jnp.ones(D), "ln2": jnp.ones(D)}
x = jax.random.normal(next(keys), (SEQ, D))

# %% md
# ## Profile a transformer block
# `--profile 20` calls the compiled block 20 times (after a warm-up call) under JAX's
# profiler, reads every kernel's execution from the trace and maps it back to the lines of this
# cell.

# %% code
%%compile --profile 20
def block(p, x):
    def norm(h, scale):
        mu = h.mean(-1, keepdims=True)
        var = ((h - mu) ** 2).mean(-1, keepdims=True)
        return (h - mu) * jax.lax.rsqrt(var + 1e-5) * scale
    qkv = norm(x, p["ln1"]) @ p["wqkv"]
    q, k, v = jnp.split(qkv.reshape(SEQ, 3 * HEADS, D // HEADS), 3, axis=1)
    s = jnp.einsum("qhd,khd->hqk", q, k) * (D // HEADS) ** -0.5
    att = jax.nn.softmax(s, axis=-1)
    x = x + jnp.einsum("hqk,khd->qhd", att, v).reshape(SEQ, D) @ p["wo"]
    h = jax.nn.gelu(norm(x, p["ln2"]) @ p["w1"])
    return x + h @ p["w2"]
block(params, x)

# %% code
c = block.compilation
p = c.profile
print(p.text(top=8))

# %% md
# **How much of the time is accounted for.** `coverage` is the share of execution time during
# which a named kernel was running; the rest is the executor handing work between threads.
# Outside execution there is dispatch: the Python call and handing the result back.

# %% code
print(f"one call: {p.step_seconds * 1e3:.2f} ms; executing: {p.execution_seconds * 1e3:.2f} ms; "
      f"on named kernels: {p.coverage:.1%} of execution; dispatch: {p.dispatch_seconds * 1e6:.0f} µs")
assert p.step_seconds > 1e-3 and p.coverage >= 0.95  # claim: time-on-named-kernels

# %% md
# ## The hot lines
# The profiler measures kernels, not lines: a line's time is *attributed*. Each kernel's
# measured time goes to the lines its ops came from; a fused kernel spanning several lines is
# split among them in proportion to an estimate of each op's cost from its shapes (a matrix
# product's `2·M·N·K` flops, one per element for element-wise ops, plus the bytes it writes),
# so a matmul fused with a small reduction gives its line nearly all of the kernel. Here is the
# cell, line by line:

# %% code
lines = c.source.lines
total = sum(p.by_cell_line.values())
for n, text in enumerate(lines, start=1):
    t = p.by_cell_line.get(n, 0.0)
    bar = "█" * round(40 * t / total)
    print(f"{n:>2} {t * 1e3:6.2f} ms {t / total:6.1%} {bar:<40} {text[:60]}")

# %% code
matmul_lines = [n for n, text in enumerate(lines, start=1) if "@" in text or "einsum" in text]
matmul_share = sum(p.by_cell_line.get(n, 0.0) for n in matmul_lines) / total
hottest = max(p.by_cell_line, key=p.by_cell_line.get)
print(f"lines with a matrix product: {matmul_lines}, {matmul_share:.0%} of the time; "
      f"hottest single line: {hottest}: {lines[hottest - 1].strip()}")
assert matmul_share > 0.5  # claim: matmuls-take-most

# %% md
# The attention scores and their softmax are written on two lines, so the softmax's time is
# not counted as a matrix product's. That the matrix products take most of the time is a fact
# about *this* block (wide layers, a short sequence), not about transformers: with narrow heads
# and a long sequence the softmax over the scores takes over (`tests/notebooks/
# test_claims_ablated.py` runs this notebook so and sees this assertion fail).
#
# The claim is about the matrix products together. The single hottest line can be another:
# `norm`'s last line runs twice (both layer norms share it), and its kernels are memory-bound
# element-wise work, which slows first when other programs share the machine's memory bus.
# The profile by *call* separates them: each call of one of your functions is a group of its
# own, numbered in the order it ran (`c.profile.by_function`; the matrix products written
# directly in `block` belong to no call, library calls such as `softmax` are one box each).

# %% code
calls = sorted(p.by_function.items(), key=lambda kv: -kv[1])
for name, t in calls[:8]:
    print(f"{name:<14} {t * 1e3:6.3f} ms {t / total:6.1%}")
assert {"norm#1", "norm#2", "gelu"} <= set(p.by_function)

# %% md
# ## The roofline
# A kernel does `flops` arithmetic on `bytes` of memory traffic (XLA's figures); their ratio is
# its *arithmetic intensity*. The machine's peaks, measured once on this CPU and cached, give a
# roof: the FLOP/s of a large matmul compiled by XLA, and the bandwidth of a streaming loop —
# from memory, and over an array that fits each cache level (tutorial 03 measures the same
# loop). A kernel whose bytes fit a cache can stream them at that cache's bandwidth, so its
# roof is the smaller of the FLOP/s peak and its intensity × that bandwidth, and its *ridge*
# (FLOP/s ÷ bandwidth) is that cache's. A roof is an upper bound: a peak measured on a busy
# machine is low, so when a kernel beats its roof the profile measures the peaks again (keeping
# the higher figures) and, if a kernel still beats them, refuses the roofline — `p.notes` says
# which happened; on a machine too busy for a roofline the cells below say so instead. Peaks
# refused for a kernel stay refused for it for ten minutes in the same kernel process, so a
# re-run of `--profile` does not wait for three more measurements.

# %% code
peaks = p.peaks
for note in p.notes:
    print("note:", note)
if peaks is None:  # refused (the note above says which kernel beat them): no roofline to draw
    print("roofline refused: the peaks measured on this machine now are no upper bound")
else:
    print(f"{peaks.device}: {peaks.flops_per_s.value / 1e9:.0f} GFLOP/s ({peaks.flops_per_s.detail})")
    print(f"from memory {peaks.bytes_per_s.value / 1e9:.0f} GB/s (ridge {peaks.ridge:.1f} FLOP/byte); "
          + ", ".join(f"≤ {size / 2**20:g} MiB {bw / 1e9:.0f} GB/s (ridge {peaks.flops_per_s.value / bw:.1f})"
                      for size, bw in peaks.bandwidths))
fusions = {f.name: f for f in c.fusions}
has_dot = lambda k: k.opcode == "dot" or "dot" in getattr(fusions.get(k.name), "ops", ())  # noqa: E731
timed = [k for k in p.kernels if k.roof_fraction is not None]  # none when the roofline is refused
print(f"{'kernel':<28} {'MB':>6} {'FLOP/byte':>9} {'GFLOP/s':>8} {'GB/s':>6} {'of roof':>7}  bound")
for k in timed[:12]:
    print(f"{k.name:<28} {k.bytes / 1e6:6.2f} {k.intensity:9.2f} {k.achieved_flops_per_s / 1e9:8.1f} "
          f"{k.achieved_bytes_per_s / 1e9:6.1f} {k.roof_fraction:7.0%}  {k.bound}"
          f"{'  (matmul)' if has_dot(k) else ''}")

# %% code
dots = [k for k in timed if has_dot(k)]
streamed = [k for k in timed if not has_dot(k) and k.bound == "memory"]
if peaks is not None:
    # each kernel's own busy time, as its roof fraction uses (XLA runs independent kernels side
    # by side on the cores, so their shares of the wall time add up to less)
    dot_share = sum(k.flops for k in dots) / sum(k.busy_seconds for k in dots) / peaks.flops_per_s.value
    moved, took = sum(k.bytes for k in streamed), sum(k.busy_seconds for k in streamed)
    roof_time = sum(k.bytes / peaks.bandwidth_for(k.bytes) for k in streamed)
    print(f"matmul kernels: {dot_share:.0%} of the FLOP/s peak together; highest {max(k.roof_fraction for k in dots):.0%}")
    print(f"memory-bound kernels ({len(streamed)}): {moved / 1e6:.1f} MB in {took * 1e3:.2f} ms = "
          f"{moved / took / 1e9:.1f} GB/s achieved; their bytes ÷ the bandwidth of each one's cache "
          f"level: {roof_time * 1e3:.2f} ms at best, so they ran at {roof_time / took:.0%} of their roofs; "
          f"a median {np.median([k.seconds for k in streamed]) * 1e6:.0f} µs each")

# %% md
# **Predict first.** Before reading the next cell: is the gelu kernel (the fused element-wise
# work after `norm(x) @ w1`) memory-bound or compute-bound on this machine? Work it out
# from the table: its intensity against the ridge of the cache level its bytes fit in.

# %% code hide
if peaks is not None:
    gelu = next(k for k in timed if not has_dot(k) and "gelu" in getattr(fusions.get(k.name), "functions", ()))
    print(f"answer: {gelu.name}: {gelu.intensity:.2f} FLOP/byte over {gelu.bytes / 2**20:.1f} MiB, whose "
          f"cache level's ridge is {peaks.ridge_for(gelu.bytes):.1f} FLOP/byte: {gelu.bound}-bound")
    assert gelu.bound == ("compute" if gelu.intensity >= peaks.ridge_for(gelu.bytes) else "memory")

# %% md
# The matmuls run near the FLOP/s roof. The memory-bound kernels do not run near theirs: a
# roof is an upper bound, not a prediction. These kernels are short — tens of microseconds,
# each moving a few MB that sit in a cache — and the roofline has no term for what a kernel
# costs besides its bytes and its FLOPs (XLA:CPU starts each one on its thread pool). What
# the roofline does say holds: none ran faster than its cache's bandwidth allows.

# %% code
# no kernel is shown above its roof: each is under it, or the roofline is refused, saying why
roof_bounds = (all(k.roof_fraction <= 1.05 for k in timed) if peaks is not None
               else any(note.startswith("refused:") for note in p.notes))
assert roof_bounds  # claim: roof-bounds-kernels
if peaks is not None:  # a refused roofline has no matmul share to check
    assert all(k.bound == "compute" for k in dots) and 0.1 < dot_share <= 1.05  # claim: matmuls-near-peak
    assert roof_time <= 1.05 * took and roof_time / took < dot_share   # memory-bound: below their roofs, further than the matmuls

# %% md
# ## What fusion saves, kernel by kernel
# Recompile the block without XLA's loop fusion (the `fusion` and `fusion-wrapper` passes; the
# matmuls stay library calls — JAX's `lower(...).compile(compiler_options=...)` under the
# hood), profile both programs in turns, three times, and compare the element-wise kernels:
# how many, the bytes they move (XLA's count) and their measured time (each side's best run).
# Then time the whole programs the same way, single calls in turns.

# %% code
disabled = next(v for v in variants_for("cpu") if v.name == "no_loop_fusion").disabled
unfused = nbcompile.compile(c.original, params, x,
                            compiler_options={"xla_disable_hlo_passes": ",".join(disabled)})
# the same by hand: JAX's lower(), compile() with the passes disabled, XLA's cost analysis
raw_off = jax.jit(c.original).lower(params, x).compile(
    compiler_options={"xla_disable_hlo_passes": ",".join(disabled)}).cost_analysis()
raw_off = raw_off[0] if isinstance(raw_off, list) else raw_off
assert raw_off["bytes accessed"] == unfused.cost["bytes_accessed"]

def elementwise(prof):
    ks = [k for k in prof.kernels if k.opcode != "dot" and "ynn" not in k.name and k.bytes]
    return len(ks), sum(k.bytes for k in ks), sum(k.seconds for k in ks)

def once(fn):
    start = time.perf_counter()
    fn(params, x).block_until_ready()
    return time.perf_counter() - start

# each step in turns: a busy moment of a shared machine then slows one turn, not one side
turns = [(elementwise(profile(c, calls=20)), elementwise(profile(unfused, calls=20)))
         for _ in range(5)]
(n_on, bytes_on, _), (n_off, bytes_off, _) = turns[0]
t_on = min(fused[2] for fused, _ in turns)
t_off = min(unfused_[2] for _, unfused_ in turns)
calls = [(once(c.fn), once(unfused.fn)) for _ in range(30)]
whole_on, whole_off = min(a for a, _ in calls), min(b for _, b in calls)
q1, q3 = np.percentile([a for a, _ in calls], [25, 75])
print(f"element-wise kernels: {n_on} → {n_off}; {bytes_on / 1e6:.1f} → {bytes_off / 1e6:.1f} MB (XLA); "
      f"{t_on * 1e3:.2f} → {t_off * 1e3:.2f} ms measured (best of five profiles each)")
print(f"whole program: {c.cost['bytes_accessed'] / 1e6:.1f} MB → {unfused.cost['bytes_accessed'] / 1e6:.1f} MB "
      f"moved (XLA); {c.summary()['kernels']} → {unfused.summary()['kernels']} kernels; "
      f"{whole_on * 1e3:.2f} → {whole_off * 1e3:.2f} ms per call (best of {len(calls)}, in turns); "
      f"the fused call's own spread: {q1 * 1e3:.2f}–{q3 * 1e3:.2f} ms (quartiles), "
      f"{(q3 - q1) / (t_off - t_on):.1f}× what fusion saved in the element-wise kernels")

# %% md
# Kernel by kernel, fusion's saving is plain in XLA's counts: fewer element-wise kernels, a
# fraction of their bytes. Their time, measured kernel by kernel, moved with the load on a shared
# 2-core machine (in some runs here the unfused ones came out faster), so it is printed, not claimed.
# The whole call is another matter: the matrix products take nearly
# all of it, and their time varies from call to call on a shared machine by as much as the
# element-wise kernels take in all. So the whole-program comparison can come out either way
# by less than its spread; what fusion certainly removed is the kernels and the bytes.

# %% code
assert n_off > n_on and bytes_off > 1.5 * bytes_on   # XLA's counts (tutorial 03 ablates fusion's claims)
assert whole_off > whole_on or whole_on - whole_off < q3 - q1  # the whole call: either way, within its spread

# %% md
# ## What you saw
# - `--profile` put the measured time of every kernel on the cell's own lines; the lines with a
#   matrix product took most of it, and nearly all execution time is on named kernels.
# - On the roofline — peaks measured as upper bounds, a bandwidth per cache level — the
#   matmuls are compute-bound and ran at a good share of the FLOP/s peak; the memory-bound
#   kernels ran at a measured share of what their bytes ÷ their cache's bandwidth allow. (On a
#   machine too busy for upper bounds, the roofline was refused, and the notes said why.)
# - Switching fusion off multiplied the element-wise kernels and the bytes they move (XLA's
#   counts), and the whole program, timed in turns, took longer.
# - In Python: `c.run_profile(calls=20)` / `c.profile`, or `nbcompile.measure.profile(c)`;
#   `c.profile.to_json()` holds every figure with its source.
