# %% md
# # 02 · What compiling does: Python → jaxpr → StableHLO → optimised HLO
#
# **You will learn** the three programs a model becomes on its way to the hardware and how big
# each is: JAX *traces* your Python into a jaxpr (a graph of primitives), *lowers* it to
# StableHLO (a portable compiler IR), and XLA *optimises and compiles* that for one target —
# and what XLA does to it, pass by pass: algebra simplified, common subexpressions merged, ops
# fused (and why fusing raises the instruction count), layouts and buffers assigned.

# %% code
%load_ext nbcompile
import re
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
    h = (h - mu) * (1 / jnp.sqrt(var + 1e-5)) * params["scale"]
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

# %% md
# The same counts straight from JAX's objects, without nbcompile: the lowered program's text
# (`c.lowered` is `jax.jit(layer).lower(params, x)`; `.as_text()` is its StableHLO) and the
# compiled program's (`c.compiled` is `.compile()` of it; `.as_text()` is XLA's optimised HLO,
# whose `ENTRY` computation lists the kernels that run).

# %% code
raw_lowered = jax.jit(c.original).lower(params, x)
raw_compiled = raw_lowered.compile()
# every stablehlo.* operation named in the text (a reduction's `applies stablehlo.add` is its body)
stablehlo_ops = re.findall(r"\bstablehlo\.(?!return\b)[a-z_]+\b", raw_lowered.as_text())
entry_ops = re.findall(r"= \S+ ([a-z][\w-]*)\(", raw_compiled.as_text().split("\nENTRY ", 1)[1])
raw_kernels = [op for op in entry_ops if op not in ("parameter", "constant")]
print(f"raw JAX: {len(stablehlo_ops)} StableHLO operations, "
      f"{len(raw_kernels)} kernels in the compiled ENTRY computation: {raw_kernels}")

# %% code
# Checked: the graph has one node per primitive; containers are equations, not kernels; XLA
# runs fewer kernels than op-by-op execution dispatches.
assert s["jaxpr_eqns"] == len(eqns)
assert s["eager_kernels"] == len(eqns) - len(containers)
assert {e.primitive.name for e in c.jaxpr.jaxpr.eqns} <= {n.op for n in c.graph.nodes}
assert s["kernels"] < s["eager_kernels"]
assert s["stablehlo_ops"] > len(c.jaxpr.jaxpr.eqns)  # lowering spells primitives out
assert len(raw_kernels) == s["kernels"] and len(stablehlo_ops) == s["stablehlo_ops"]

# %% md
# ## 3. What XLA does, in order
# XLA's optimiser is a pipeline of passes. `c.passes` compiles the program once more with XLA's
# dump switched on (`%%compile --passes` does it in the first compile) and reads back what XLA
# wrote after every pass that changed the program, in order: the instructions of every
# computation and the fusions after each step, and the opcodes the step added and removed.

# %% code
log = c.passes
steps = log.changed()
print(f"XLA dumped {len(log)} steps; {len(steps)} changed the program:")
for st in steps:
    delta = ", ".join([f"+{n} {op}" for op, n in st.added.items()]
                      + [f"-{n} {op}" for op, n in st.removed.items()])
    print(f"{st.name:<22} {st.instructions:>3} instructions {st.fusions:>2} fusions   {delta[:72]}")

# %% md
# Read the table top to bottom:
# - the **call-inliner** pastes `relu`'s own small jitted function into the program.
# - **algsimp** (algebraic simplification) rewrites expressions into cheaper equal ones: the
#   divisions by a constant become multiplications, `1 / sqrt(v)` becomes `rsqrt(v)`. (XLA up
#   to jaxlib 0.12.0.1 also rewrote `x / sqrt(v)` that way; jaxlib 0.12.1 keeps that division.)
# - **cse** (common-subexpression elimination) computes `h - mu` once instead of twice.
# - the **dot library rewriter** hands the matrix product and the reductions to this CPU's
#   kernel library, and **fusion** merges the element-wise work into a few kernels. The
#   instruction count *rises* there: a fusion keeps its ops, inside a fused computation of its
#   own, while the main program now calls a few kernels instead of many ops.

# %% code
def total(op, key):
    return sum(getattr(st, key).get(op, 0) for st in steps)

cse_removed = sum(st.removed.get("subtract", 0) for st in steps if st.name == "cse")
subs_in_jaxpr = sum(e.primitive.name == "sub" for e in c.jaxpr.jaxpr.eqns)
print(f"h - mu: {subs_in_jaxpr} sub in the jaxpr; cse removed {cse_removed} subtract")
print(f"algsimp: -{total('divide', 'removed')} divide, +{total('multiply', 'added')} multiply, "
      f"-{total('sqrt', 'removed')} sqrt, +{total('rsqrt', 'added')} rsqrt")
assert subs_in_jaxpr == 2 and cse_removed == 1  # claim: cse-merges
assert total("sqrt", "removed") == 1 and total("rsqrt", "added") == 1  # claim: algsimp-rsqrt
assert total("divide", "removed") >= 2  # the two means' divisions by 256 became multiplications
assert any(st.name == "call-inliner" and st.removed.get("call") for st in steps)

# %% md
# **Predict first.** `h - mu` is written twice in the cell and cse merged the two into one
# `subtract`. How many `subtract` instructions will XLA's *final* program hold, counting those
# inside its fused kernels, and in how many kernels? Think about what fusion does with a cheap
# element-wise value that two kernels read. Count them in the compiled program's own text
# (`c.compiled.as_text()`) — the answer is checked in the hidden cell below.

# %% code hide
where = {}  # fused computation -> its subtract instructions
for comp in c.compiled.as_text().split("\n\n"):
    n = len(re.findall(r"\} subtract\(", comp))
    if n:
        where[comp.split(" ", 1)[0].lstrip("%")] = n
print(f"answer: {sum(where.values())} subtract instructions, in {len(where)} kernels {where}: cse "
      f"merged the two, then fusion copied the cheap subtract into each kernel that reads h - mu "
      f"(recomputing it costs less than writing it to memory and reading it back)")
assert sum(where.values()) == 2 and len(where) == 2 and subs_in_jaxpr == 2 and cse_removed == 1

# **One fusion, before and after.** The normalisation line became one kernel. Before the fusion
# pass each of its element-wise ops was its own instruction of the main program, writing a full
# array to memory; after it, one loop computes them all, element by element, in registers.
# `c.passes.diff(i)` shows what the fusion pass wrote, and each kernel knows the cell lines and
# the calls (`Fusion.functions`) its ops came from.

# %% code
fusion_pass = next(st for st in steps if st.name == "fusion")
before_fusion = steps[steps.index(fusion_pass) - 1]
diff = [ln for ln in log.diff(fusion_pass.index).splitlines() if " fusion(" in ln]
kernel = lambda ln: ln[1:].split("=")[0].replace("ROOT", "").strip(" %")  # noqa: E731
kept = {kernel(ln) for ln in diff if ln.startswith("-")}  # fusions that were there before
formed = [ln for ln in diff if ln.startswith("+") and kernel(ln) not in kept]
print(f"the fusion pass: {before_fusion.fusions} → {fusion_pass.fusions} fusions; it formed")
for ln in formed:
    print("   ", ln[1:].strip()[:100])
fusion = max(c.fusions, key=lambda f: sum(op in ("subtract", "multiply", "maximum") for op in f.ops))
elementwise = [op for op in fusion.ops if op not in ("parameter", "constant", "broadcast", "bitcast")]
print(f"{fusion.name}: one kernel for {len(elementwise)} ops {elementwise} "
      f"from cell lines {fusion.source_lines}, in the calls {fusion.functions}")
assert fusion_pass.fusions > before_fusion.fusions and len(formed) == fusion_pass.added["fusion"]
assert fusion_pass.instructions > before_fusion.instructions  # the fused ops are all still there
assert len(elementwise) >= 3 and any(fusion.name in ln for ln in formed)

# %% md
# **Buffer assignment.** If every value of the unoptimised program had its own buffer, how much
# memory would the intermediates take? XLA's buffer assignment (`memory_analysis()`) says what
# the compiled program really allocates for temporaries. Predict it from the kernels above: a
# buffer is needed only for a value that leaves one kernel for another, and only while it is
# live. The matrix product's output `h` (`B × D` float32) is read by the last kernel, so it
# lives to the end; the per-row statistics are `B` floats each; the centred `h - mu` that the
# variance's kernel reads is written into the output's own buffer, which is not yet in use.

# %% code
pre = c.lowered.as_text(dialect="hlo")  # the program XLA received, before its passes
entry = pre.split("\nENTRY ", 1)[1]
values = [(m[0], m[1]) for m in re.findall(r"= f32\[([\d,]*)\]\S* ([a-z][\w-]*)\(", entry)]
naive = sum(4 * int(np.prod([int(d) for d in shape.split(",") if d])) for shape, op in values
            if op not in ("parameter", "constant"))
temp = c.compiled.memory_analysis().temp_size_in_bytes
B, D = x.shape
h_bytes, row_bytes = B * D * 4, B * 4
print(f"every intermediate in its own buffer: {naive / 1024:.0f} KiB; XLA allocates "
      f"{temp / 1024:.1f} KiB of temporaries; predicted h ({h_bytes / 1024:.0f} KiB) plus a few "
      f"{row_bytes} B row statistics")
print("layouts:", sorted(set(re.findall(r"f32\[[\d,]+\]\{([\d,]+)\}", c.hlo))))
assert h_bytes <= temp <= h_bytes + 4 * row_bytes  # claim: buffers-predicted
assert temp < naive / 4

# %% md
# ## 4. Compiled for one target
# The optimised program belongs to the backend it was compiled for (here this machine's CPU):
# its kernels, layouts and XLA's cost estimates.

# %% code
raw_cost = raw_compiled.cost_analysis()  # the same figures from JAX: a dict from XLA
raw_cost = raw_cost[0] if isinstance(raw_cost, list) else raw_cost  # a list of one on old JAX
print(c.backend, "| flops:", c.cost["flops"], "| bytes accessed:", c.cost["bytes_accessed"],
      "| cost_analysis():", raw_cost["flops"], raw_cost["bytes accessed"])
print(f"the matrix product alone: 2·B·D·D = {2 * B * D * D} flops; the element-wise work adds "
      f"{c.cost['flops'] / (2 * B * D * D) - 1:.1%}")
print("compile seconds:", round(c.timings["compile"], 3))
assert c.backend == jax.default_backend()
assert c.cost["flops"] == raw_cost["flops"] and c.cost["bytes_accessed"] == raw_cost["bytes accessed"]
assert 2 * B * D * D <= c.cost["flops"] < 1.05 * 2 * B * D * D  # claim: matmul-flops

# %% md
# ## What you saw
# - Tracing turned Python into a graph of primitives (the jaxpr); lowering spelled each
#   primitive out in StableHLO, so the count rose.
# - XLA then simplified the algebra, merged the repeated subtraction, fused element-wise ops into
#   a few kernels and assigned layouts and buffers: far less memory than one buffer per value.
# - Every count above was read from this compile — and from JAX's own `lower()`, `compile()`,
#   `as_text()` and `cost_analysis()`, which give the same figures.
#   Next: `03_folding_and_fusion.ipynb` measures what folding and fusion buy.
