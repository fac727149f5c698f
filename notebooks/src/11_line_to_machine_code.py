# %% md
# # 11 · From a line of Python to machine code
#
# **You will learn** to follow one line of a model, `jax.nn.gelu(h @ w1)`, all the way down:
# the jaxpr equations it traces to, the StableHLO it lowers to, the optimised HLO, the XLA passes
# that changed the program on the way (`c.passes`), the fused kernel it ends up in
# (`c.fusions`), and that kernel's machine code with its vector instructions
# (`c.kernel_code`). Then you will measure where compile time goes (`c.compile_time`) for a
# stack of layers written as a Python loop and as `jax.lax.scan`, and what each costs at run
# time.

# %% code
%load_ext nbcompile
import collections, platform, re, time
import jax, jax.numpy as jnp, numpy as np
from nbcompile.analysis import parse_hlo
from nbcompile.errors import NbcompileError

rng = np.random.default_rng(0)
h = jnp.asarray(rng.normal(size=(128, 256)), jnp.float32)
w1 = jnp.asarray(rng.normal(size=(256, 512)) / 16, jnp.float32)
w2 = jnp.asarray(rng.normal(size=(512, 256)) / 22, jnp.float32)

# %% md
# ## The cell
# `--passes` asks XLA, for one more compile of the same program, to write the module after every
# pass that changed it and to keep each kernel's LLVM IR and object code; nbcompile reads that
# back into memory. Without the flag the same happens the first time you ask for `c.passes`,
# `c.kernel_code(...)` or `c.compile_time`.

# %% code
%%compile --passes
def mlp(h, w1, w2):
    h = jax.nn.gelu(h @ w1)
    return h @ w2
mlp(h, w1, w2)

# %% code
c = mlp.compilation
LINE = next(n for n, text in enumerate(c.source.lines, start=1) if "gelu" in text)
print(f"the line we follow: cell line {LINE}: {c.source.lines[LINE - 1].strip()}")

# %% md
# ## 1. Traced: jaxpr equations
# Tracing runs the Python once with abstract values. `jax.nn.gelu` is a Python function too: it
# leaves no call equation behind, only the primitives it used, each remembering the cell line it
# came from (and a `gelu/` name scope, which `Fusion.functions` reads below).
# `c.compile_time.eqns_by_line` counts them line by line.

# %% code
at_line = [n for n in c.graph.nodes if n.kind == "op" and n.location and n.location.line == LINE]
eqns = {loc.line: n for loc, n in c.compile_time.eqns_by_line.items()}
print(f"line {LINE} traced to {eqns[LINE]} equations: {[n.op for n in at_line]}")
print(f"the whole program: {sum(eqns.values())} equations, {len(c.jaxpr.jaxpr.eqns)} in the jaxpr")
assert eqns[LINE] == len(at_line) and at_line[0].op == "dot_general"
assert "tanh" in [n.op for n in at_line]  # gelu's tanh approximation, inlined
assert sum(eqns.values()) == len(c.jaxpr.jaxpr.eqns)

# %% md
# ## 2. Lowered: StableHLO
# Lowering spells each primitive out in StableHLO (`integer_pow` becomes multiplies, scalars
# become broadcasts) and keeps the source location of each operation (`loc(...)`, shown with
# `debug_info=True`): file, line and the columns of the expression.

# %% code
stablehlo = c.lowered.as_text(debug_info=True)
ops = re.findall(r"= (stablehlo\.[a-z_]+)", stablehlo)
here = sorted(set(re.findall(rf'loc\("{re.escape(c.source.filename)}":{LINE}:(\d+) to :(\d+)\)',
                             stablehlo)))
print(f"{len(ops)} StableHLO operations:", dict(collections.Counter(ops)))
for start, end in here:
    print(f"  a location at line {LINE}, columns {start}–{end}: "
          f"{c.source.lines[LINE - 1][int(start):int(end)]!r}")
assert ops.count("stablehlo.tanh") == 1 and ops.count("stablehlo.dot_general") == 2  # claim: tanh-lowered-once
assert len(ops) > len(c.jaxpr.jaxpr.eqns) and len(here) >= 2  # the call and the `h @ w1`

# %% md
# ## 3. Optimised: HLO after XLA
# XLA's optimised module (`c.hlo`) is what runs. Its ENTRY computation is the program's
# parameters and kernels, in order; each fused computation holds a kernel's ops, and each op's
# metadata still names the JAX primitive (`op_name`) and a stack frame that leads back to the
# cell line.

# %% code
module = parse_hlo(c.hlo)
entry = module.computations[module.entry]
for i in entry.instructions:
    print(f"  {i.name:<22} {i.opcode:<10} {i.shape}  calls {i.called}")
# c.hlo is the compiled program's text: by hand, jax.jit(...).lower(...).compile().as_text()
raw = jax.jit(c.original).lower(h, w1, w2).compile().as_text()
raw_entry = parse_hlo(raw).computations[parse_hlo(raw).entry]
print("the same ENTRY from jax.jit(mlp).lower(h, w1, w2).compile().as_text():",
      [i.opcode for i in raw_entry.instructions] == [i.opcode for i in entry.instructions])
last = c.passes.steps[-1]
print(f"{module.instruction_count()} instructions in all computations; the pass log's last step: "
      f"{last.instructions} instructions, {last.fusions} fusions")
assert [i.opcode for i in raw_entry.instructions] == [i.opcode for i in entry.instructions]
assert last.instructions == module.instruction_count()
assert last.fusions == sum(i.opcode == "fusion" for comp in module.computations.values()
                           for i in comp.instructions)

# %% md
# ## 4. The passes that changed it
# `c.passes` lists, in XLA's order, each step it dumped: the start of every pass pipeline and
# every pass that reported a change (`*` when the module's text really changed), with the
# instruction and fusion counts after it and the opcodes it added and removed.

# %% code
print(c.passes)
print(c.passes.text())

# %% md
# Two steps make the kernels. `dot-library-rewriter` hands both matrix products to a library
# (each becomes a `kCustom` fusion that calls it); the `fusion` pass then gathers gelu's
# element-wise ops into one loop fusion. `c.passes.diff(i)` is the module before and after a
# step, as a unified diff: here the ops leaving the ENTRY computation (`-`) and the fused
# computation that takes them in (`+`).

# %% code
steps = c.passes.steps
library = next(s for s in steps if s.name == "dot-library-rewriter" and s.changed)
fusion = next(s for s in steps if s.name == "fusion" and s.changed)
before = steps[fusion.index - 1]
print(f"step {library.index} {library.name}: fusions {steps[library.index - 1].fusions} → "
      f"{library.fusions}")
print(f"step {fusion.index} {fusion.name}: fusions {before.fusions} → {fusion.fusions}, "
      f"instructions {before.instructions} → {fusion.instructions}")
diff = c.passes.diff(fusion.index).splitlines()
shown = [d for d in diff if d[:1] in "+-" and not d.startswith(("+++", "---"))
         and re.search(r"tanh|kind=kLoop|^\+%fused", d)]
for d in shown:
    print(d[:150])
assert library.fusions - steps[library.index - 1].fusions == 2  # claim: one-library-kernel-per-product
assert fusion.fusions > before.fusions
assert any(d.startswith("-") and "tanh(" in d for d in diff)  # tanh left the ENTRY ...
assert any(d.startswith("+") and "tanh(" in d for d in diff)  # ... for a fused computation
assert any(d.startswith("+") and "kind=kLoop" in d for d in diff)

# %% md
# ## 5. The fused kernel
# `c.fusions` has every kernel with its member ops, the cell lines they came from and the
# functions that were called on the way (`Fusion.functions`). The line we follow became two
# kernels: the matrix product (a library call) and gelu's loop fusion.

# %% code
kernels = [f for f in c.fusions if LINE in {loc.line for loc in f.locations}]
for f in kernels:
    computed = [op for op in f.ops if op not in ("constant", "broadcast")]
    print(f"{f.name:<26} {f.kind:<7} lines {sorted({loc.line for loc in f.locations})} "
          f"functions {f.functions}  ops {computed}")
gelu = next(f for f in kernels if "tanh" in f.ops)
dot = next(f for f in kernels if "dot" in f.ops)
assert {loc.line for loc in gelu.locations} == {LINE} and gelu.kind == "loop"
assert "gelu" in gelu.functions and "dot" not in gelu.ops and dot.kind == "custom"

# %% md
# ## 6. Its machine code
# `c.kernel_code(name)` finds the kernel's symbol in XLA's own object files and disassembles it
# with Capstone. `.vector_width` is the widest SIMD register it uses (x86: `xmm` 128 bits, `ymm`
# 256, `zmm` 512): a *packed* instruction computes one operation for several elements at once.

# %% code
code = c.kernel_code(gelu.name)
print(code)
asm = code.asm.splitlines()
mnemonics = collections.Counter(line.split(":", 1)[1].split()[0] for line in asm)
print("most used instructions:", mnemonics.most_common(8))
if code.vector_width:
    print(f"widest register: {code.vector_width} bits = {code.vector_width // 32} float32 lanes")
# packed single-precision instructions (AVX: v...ps) on 256- or 512-bit registers
packed = [line for line in asm if re.search(r":\s+v\w+ps\s+[yz]mm", line)]
wide = sum(bool(re.search(r"\b[yz]mm\d", line)) for line in asm)
print(f"{wide} of {code.instructions} instructions use 256- or 512-bit registers; "
      f"{len(packed)} are packed float32 instructions, the first of them:")
print("\n".join(packed[:12]))

# %% code
assert code.instructions == len(code.lines) == len(asm) > 0
if platform.machine() in ("x86_64", "AMD64"):
    assert code.isa == "x86-64" and (code.vector_width or 0) >= 256
    assert wide > code.instructions / 4 and len(packed) >= 8

# %% md
# **Which line each instruction came from, and how exactly.** Every instruction in `code.lines`
# carries source locations. XLA writes no debug locations into its kernels' LLVM IR (there is no
# `!dbg` in it), so an instruction cannot be traced to the one op it computes: the mapping is *per
# kernel* — each instruction carries the locations of all the kernel's ops. For this kernel,
# fused from one line, that is exact; for a kernel fused from several lines, each instruction
# lists them all. `code.mapping` says so.

# %% code
lines_of = {loc.line for _, locations in code.lines for loc in locations}
print(f"the {code.instructions} instructions map to cell lines {sorted(lines_of)}")
print("mapping:", code.mapping)
assert lines_of == {LINE} and "!dbg" not in code.llvm_ir and "kernel" in code.mapping

# %% md
# The matrix product has no code of XLA's own: XLA:CPU calls a library for it, and asking for
# its code says so rather than showing something else.

# %% code
try:
    c.kernel_code(dot.name)
    raise AssertionError("a library call has no XLA kernel code")
except NbcompileError as err:
    print(f"{err.code}: {str(err).splitlines()[0][:160]}")
    assert err.code == "NBC600"

# %% md
# ## 7. A stack of layers: a Python loop or `lax.scan`
# A model often applies the same layer many times. Written as a Python loop, tracing runs the
# loop: the program holds every layer's ops, and XLA optimises every copy.
# `jax.lax.scan` traces the body once and keeps a loop in the program.

# %% code
LAYERS = 96  # the cells below write it out, so that nbcompile can read the loop's length
w = jnp.asarray(rng.normal(size=(128, 128)) / 11, jnp.float32)
x = jnp.asarray(rng.normal(size=(32, 128)), jnp.float32)

# %% code
%%compile -q
def unrolled(x, w):
    for _ in range(96):
        x = jax.nn.gelu(x @ w)
    return x
unrolled(x, w)

# %% code
%%compile -q
def scanned(x, w):
    def layer(x, _):
        return jax.nn.gelu(x @ w), None
    x, _ = jax.lax.scan(layer, x, None, length=96)
    return x
scanned(x, w)

# %% md
# **Predict first.** The layer's line, `jax.nn.gelu(x @ w)`, traces to a handful of jaxpr
# equations. How many equations will that line hold in the unrolled program, and how many in
# the scan's body? (`c.compile_time.eqns_by_line` counts them; the hidden cell checks.)

# %% code hide
def body_line(comp):
    return next(n for n, text in enumerate(comp.source.lines, 1) if "gelu" in text)

cu, cs = unrolled.compilation, scanned.compilation
eq_u = sum(n for loc, n in cu.compile_time.eqns_by_line.items() if loc.line == body_line(cu))
eq_s = sum(n for loc, n in cs.compile_time.eqns_by_line.items() if loc.line == body_line(cs))
print(f"answer: {eq_u} unrolled and {eq_s} in the scan body: tracing ran the Python loop "
      f"{LAYERS} times, the scan's body once ({eq_u // eq_s}×)")
assert eq_u == LAYERS * eq_s  # claim: unrolled-equations

# %% md
# `c.compile_time` is measured: trace and lower are the stages' own times; the XLA compile is
# split into its HLO passes (`xla`) and code generation (`codegen`: buffer assignment, LLVM,
# machine code) in the proportion measured on the dumped compile (until its last HLO pass was
# written, and the rest). When JAX's persistent cache served a program, the XLA figure is that of
# the dumped compile, and a note says so. `eqns_by_line` counts the equations each line emitted,
# and `advice` speaks up when one line holds most of them.

# %% code
tu, ts = cu.compile_time, cs.compile_time
for name, comp, ct in (("unrolled", cu, tu), ("scan", cs, ts)):
    print(f"{name:>8}: {ct.text().splitlines()[0]}")
    print(f"          equations by line {({loc.line: n for loc, n in ct.eqns_by_line.items()})}; "
          f"{comp.summary()['kernels']} kernels")
    for note in ct.notes:
        print("          note:", note)
for text, _, _ in tu.advice + ts.advice:
    print("advice:", text)

# %% code
def scaling(ct):  # the parts of the compile that grow with the program
    return ct.trace + ct.lower + ct.xla

print(f"the layer's line: {eq_u} equations unrolled, {eq_s} in the scan body ({eq_u // eq_s}×)")
print(f"compile: {tu.total:.2f} s unrolled, {ts.total:.2f} s with scan "
      f"({tu.total / ts.total:.1f}×); trace + lower + HLO passes: {scaling(tu):.3f} s vs "
      f"{scaling(ts):.3f} s ({scaling(tu) / scaling(ts):.0f}×)")
assert tu.total > ts.total and scaling(tu) > scaling(ts)  # grows with the program (2-4x measured: fixed costs weigh more on a fast CPU)
assert len(tu.advice) == 1 and ts.advice == []
[(text, where, share)] = tu.advice
assert where.line == body_line(cu) and share > 0.9
assert f"unrolled {LAYERS}×" in text and "lax.scan" in text

# %% md
# Code generation grew far less than the rest. The matrix products are library calls, with no
# code to generate, and the unrolled program's gelu kernels, one per layer, compute the same
# thing: XLA:CPU compiles identical fusions once. `c.kernel_code` of one of them returns the code
# it shares (`shared_with` names the kernel whose code it is).

# %% code
gelus = [f for f in cu.fusions if "tanh" in f.ops]
middle = cu.kernel_code(gelus[LAYERS // 2].name)
in_scan = sum("tanh" in f.ops for f in cs.fusions)
print(f"{len(gelus)} gelu kernels in the unrolled program, {in_scan} in the scan; "
      f"{middle.name} runs the code of {middle.shared_with} ({middle.instructions} instructions)")
print(f"code generation: {tu.codegen:.3f} s unrolled, {ts.codegen:.3f} s with scan; "
      f"the rest of the compile: {scaling(tu):.3f} s vs {scaling(ts):.3f} s")
assert len(gelus) == LAYERS and middle.shared_with not in (None, middle.name)  # claim: identical-kernels-share-code
assert tu.codegen - ts.codegen < (scaling(tu) - scaling(ts)) / 2
assert middle.asm == cu.kernel_code(middle.shared_with).asm

# %% md
# **At run time.** Both programs compute the same thing; the unrolled one runs its kernels in a
# straight line, the scan runs a `while` loop whose body holds the layer's kernels, plus a
# counter and a comparison per iteration. Time single calls of both, in turns, many times, and
# keep each one's fastest: a busy moment of a shared machine then slows some calls, not one side.

# %% code
def once(f):
    start = time.perf_counter()
    f(x, w).block_until_ready()
    return time.perf_counter() - start

once(unrolled), once(scanned)  # the first calls
turns = [(once(unrolled), once(scanned)) for _ in range(100)]
run_u, run_s = min(u for u, _ in turns), min(s for _, s in turns)
print(f"per call: {run_u * 1e3:.2f} ms unrolled, {run_s * 1e3:.2f} ms with scan "
      f"(scan / unrolled ×{run_s / run_u:.2f})")
saved = tu.total - ts.total
if run_u < run_s:
    print(f"the unrolled program is faster per call; it pays back its longer compile "
          f"({saved:.2f} s) after {saved / (run_s - run_u):,.0f} calls")
else:
    print(f"the scan was not slower per call and compiled {saved:.2f} s faster: it wins on both")
np.testing.assert_allclose(np.asarray(unrolled(x, w)), np.asarray(scanned(x, w)), rtol=1e-5,
                           atol=1e-5)
scan_module = parse_hlo(cs.hlo)
assert "while" in {i.opcode for i in scan_module.computations[scan_module.entry].instructions}
assert cu.summary()["kernels"] >= 2 * LAYERS > 10 * cs.summary()["kernels"]
assert 0.75 < run_s / run_u < 1.33  # about the same run time (measured ×0.95-0.97)

# %% md
# Here the loop is the better deal: far less to trace and compile, and a run time close to the
# unrolled one (printed above; the assertion allows a quarter either way, several times the
# spread measured on a busy machine). Unrolling can pay where XLA does more with all
# the layers in view than with one (fusing element-wise work across layers, overlapping
# independent ones): measure it, as above, before choosing.

# %% md
# ## What you saw
# - One line, `jax.nn.gelu(h @ w1)`, traced to a handful of jaxpr equations, lowered to more
#   StableHLO operations that keep its line and columns, and ended as two kernels: a library
#   call for the matrix product and one loop fusion for gelu.
# - `c.passes` showed the steps that made them: `dot-library-rewriter` for the products, the
#   `fusion` pass for the element-wise ops, and `c.passes.diff` showed the ops moving into the
#   fused computation; the last step's counts are the optimised module's.
# - `c.kernel_code` showed the fused kernel's machine code: packed instructions on wide vector
#   registers. Its mapping to source lines is per kernel, since XLA emits no debug locations.
# - A loop of layers written in Python put every layer's equations on one line, and the compile
#   grew with them; `lax.scan` traced one layer, compiled in less time and ran about as fast.
#   `c.compile_time.advice` named the line and the fix.
