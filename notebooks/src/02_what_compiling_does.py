# %% md
# # 02 · What compiling does: Python → jaxpr → StableHLO → optimised HLO
#
# **You will learn** the three programs a model becomes on its way to the hardware and how big
# each is: JAX *traces* your Python into a jaxpr (a graph of primitives), *lowers* it to
# StableHLO (a portable compiler IR), and XLA *optimises and compiles* that for one target —
# and what XLA does to it, pass by pass: why the op count rises before it falls, common
# subexpressions merged, algebra simplified, ops fused, layouts and buffers assigned.

# %% code
%load_ext nbcompile
import collections, glob, os, re, tempfile
import jax, jax.numpy as jnp, numpy as np
from nbcompile.debug import equation_ids, subjaxprs

rng = np.random.default_rng(0)
params = {"w": jnp.asarray(rng.normal(size=(256, 256)) / 16, jnp.float32),
          "scale": jnp.ones((1, 256), jnp.float32)}
x = jnp.asarray(rng.normal(size=(64, 256)), jnp.float32)

# %% code
%%compile
def layer(params, x):
    h = x @ params["w"]
    mu = h.mean(axis=-1, keepdims=True)
    var = ((h - mu) ** 2).mean(axis=-1, keepdims=True)
    h = (h - mu) / jnp.sqrt(var + 1e-5) * params["scale"]
    return jax.nn.relu(h)
layer(params, x)

# %% md
# ## 1. The traced graph (jaxpr)
# Tracing ran `layer` once with abstract values (shapes and dtypes only) and recorded every
# primitive it called. Python control flow and function calls are gone; what is left is a graph.
# Note `h - mu` written twice in the cell: the jaxpr computes it twice too (two `sub`).

# %% code
c = layer.compilation
print(c.jaxpr.pretty_print(use_color=False)[:1100])

# %% md
# ## 2. StableHLO, then XLA's optimised program
# The same graph, lowered to StableHLO, then optimised by XLA for this machine's CPU. Count the
# operations at each level and the *kernels* that actually run.

# %% code
s = c.summary()
eqns = [e for _, e in equation_ids(c.jaxpr)]
containers = [e.primitive.name for e in eqns if subjaxprs(e)]
print(f"jaxpr equations        {s['jaxpr_eqns']:>4}   ({len(c.jaxpr.jaxpr.eqns)} at the top level)")
print(f"StableHLO operations   {s['stablehlo_ops']:>4}")
print(f"HLO before optimising  {s['hlo_ops_before']:>4}")
print(f"kernels after XLA      {s['kernels']:>4}   ({s['fusions']} of them fusions)")
print(f"op by op, JAX would dispatch {s['eager_kernels']} primitives: the {len(eqns)} equations "
      f"less {len(containers)} containers that only hold others ({', '.join(containers)})")

# %% code
# Checked: the graph has one node per primitive; containers are equations, not kernels; XLA
# runs fewer kernels than op-by-op execution dispatches.
assert s["jaxpr_eqns"] == len(eqns)
assert s["eager_kernels"] == len(eqns) - len(containers)
assert {e.primitive.name for e in c.jaxpr.jaxpr.eqns} <= {n.op for n in c.graph.nodes}
assert s["kernels"] < s["eager_kernels"]
assert s["stablehlo_ops"] > len(c.jaxpr.jaxpr.eqns)  # lowering spells primitives out

# %% md
# ## 3. What XLA does, in order
# XLA's optimiser is a pipeline of passes. Ask it to write the program after every pass (the
# `xla_dump_to` and `xla_dump_hlo_pass_re` options, for this one compile) and count the
# operations of the main (ENTRY) computation after each pass that changed them.

# %% code
dump = tempfile.mkdtemp()
compiled = jax.jit(c.original).lower(params, x).compile(
    compiler_options={"xla_dump_to": dump, "xla_dump_hlo_pass_re": ".*"})

def entry_ops(path):
    """Opcode counts of the ENTRY computation of one dumped HLO module."""
    text = open(path).read().split("\nENTRY ", 1)[1].split("\n}\n", 1)[0]
    return collections.Counter(re.findall(r"= \S+ ([a-z][\w-]*)\(", text))

files = sorted(glob.glob(f"{dump}/*jit_layer.[0-9][0-9][0-9][0-9].*.txt"))
before = entry_ops(glob.glob(f"{dump}/*jit_layer.before_optimizations.txt")[0])
steps, last = [("before optimising", before)], before
for path in files:
    name = re.search(r"\.after_([\w-]+)\.before_", path)
    ops = entry_ops(path)
    if name and name.group(1) != "pipeline-start" and ops != last:
        steps.append((name.group(1), ops))
        last = ops
for i, (name, ops) in enumerate(steps):
    prev = steps[max(i - 1, 0)][1]
    change = ", ".join(f"{'+' if ops[k] > prev[k] else '-'}{abs(ops[k] - prev[k])} {k}"
                       for k in sorted(set(ops) | set(prev)) if ops[k] != prev[k])
    print(f"{name:<22} {sum(ops.values()):>3} ops   {change[:84]}")

# %% md
# Read the table top to bottom:
# - **lowering** made more operations than the jaxpr had equations: a `mean` is a reduce, a
#   divide and a broadcast; constants and broadcasts become explicit. The inliner then pastes
#   `relu`'s own small jitted function into the program.
# - **algsimp** (algebraic simplification) rewrites expressions into cheaper equal ones: the
#   divisions by a constant become multiplications, `x / sqrt(v)` becomes `x * rsqrt(v)`.
# - **cse** (common-subexpression elimination) computes `h - mu` once instead of twice.
# - **fusion** merges the element-wise work into a few kernels: the big drop.
# - **layout assignment** fixes each array's memory order (`{1,0}`: row-major) and **buffer
#   assignment** gives every value that still lives in memory a slot, reusing slots.

# %% code
ops_of = dict(steps)
after_cse = next(ops for name, ops in steps if name == "cse")
subs_in_jaxpr = sum(e.primitive.name == "sub" for e in c.jaxpr.jaxpr.eqns)
print(f"h - mu: {subs_in_jaxpr} sub in the jaxpr, {before['subtract']} before optimising, "
      f"{after_cse['subtract']} after cse")
print(f"divide: {before['divide']} → {after_cse['divide']};  sqrt: {before['sqrt']} → "
      f"{after_cse['sqrt']};  rsqrt: {before['rsqrt']} → {after_cse['rsqrt']}")
print(f"ENTRY ops: {sum(before.values())} before optimising, peak "
      f"{max(sum(o.values()) for _, o in steps)}, {sum(last.values())} at the end")
assert subs_in_jaxpr == before["subtract"] == 2 and after_cse["subtract"] == 1
assert before["sqrt"] == 1 and after_cse["rsqrt"] == 1 and after_cse["divide"] < before["divide"]
assert max(sum(o.values()) for _, o in steps) > sum(before.values()) > sum(last.values())

# %% md
# **One fusion, before and after.** The normalisation line became one kernel. Before the fusion
# pass each of its element-wise ops was its own ENTRY instruction writing a full array to
# memory; after it, one loop computes them all, element by element, in registers.

# %% code
fusion = max(c.fusions, key=lambda f: sum(op in ("subtract", "multiply", "maximum") for op in f.ops))
before_fusion = next(ops for i, (name, ops) in enumerate(steps) if steps[i + 1][0] == "fusion")
elementwise = [op for op in fusion.ops if op not in ("parameter", "constant", "broadcast", "bitcast")]
print(f"{fusion.name}: one kernel for {len(elementwise)} ops {elementwise} "
      f"from cell lines {fusion.source_lines}")
print(f"ENTRY ops before the fusion pass: {sum(before_fusion.values())}; after: "
      f"{sum(ops_of['fusion'].values())}")
assert len(elementwise) >= 3 and sum(ops_of["fusion"].values()) < sum(before_fusion.values())

# %% md
# **Buffer assignment.** If every value of the unoptimised program had its own buffer, how much
# memory would the intermediates take? XLA's buffer assignment (`memory_analysis()`) says what
# the compiled program really allocates for temporaries.

# %% code
pre = open(glob.glob(f"{dump}/*jit_layer.before_optimizations.txt")[0]).read()
entry = pre.split("\nENTRY ", 1)[1]
values = [(m[0], m[1]) for m in re.findall(r"= f32\[([\d,]*)\]\S* ([a-z][\w-]*)\(", entry)]
naive = sum(4 * int(np.prod([int(d) for d in shape.split(",") if d])) for shape, op in values
            if op not in ("parameter", "constant"))
temp = compiled.memory_analysis().temp_size_in_bytes
print(f"every intermediate in its own buffer: {naive / 1024:.0f} KiB; XLA allocates "
      f"{temp / 1024:.1f} KiB of temporaries (fused values never reach memory; slots are reused)")
print("layouts:", sorted(set(re.findall(r"f32\[[\d,]+\]\{([\d,]+)\}", compiled.as_text()))))
assert temp < naive / 4

# %% md
# ## 4. Compiled for one target
# The optimised program belongs to the backend it was compiled for (here this machine's CPU):
# its kernels, layouts and XLA's cost estimates.

# %% code
print(c.backend, "| flops:", c.cost["flops"], "| bytes accessed:", c.cost["bytes_accessed"])
print("compile seconds:", round(c.timings["compile"], 3))
assert c.backend == jax.default_backend()
assert c.cost["flops"] >= 2 * 64 * 256 * 256  # at least the matmul's multiply-adds

# %% md
# ## What you saw
# - Tracing turned Python into a graph of primitives (the jaxpr); lowering spelled each
#   primitive out in StableHLO, so the count rose.
# - XLA then simplified the algebra, merged the repeated subtraction, fused element-wise ops into
#   a few kernels and assigned layouts and buffers: far less memory than one buffer per value.
# - Every count above was read from this compile, not asserted.
#   Next: `03_folding_and_fusion.ipynb` measures what folding and fusion buy.
