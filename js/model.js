// Report decoding and graph preparation: indexes, the group tree, labels for parameters/scalars.
//
// Parameters and scalar constants are drawn as labels on their consumers, not as nodes (a scalar
// used 142 times would otherwise dominate the layout). Groups come from the report; a graph with
// no groups gets groups from node paths; any container with too many children is split into
// chunks in program order (recursively, at most CHUNK_FANOUT each) so no single expansion draws
// more than CHUNK_MAX boxes.

export const CHUNK_MAX = 100;
const CHUNK = 50;
const CHUNK_FANOUT = 20;

// What Python sends (nbcompile.report.html.PACK_FORMAT); nbcols1 is nbcols2 without $like/$tab/$tabs.
const FORMATS = new Set(["nbcols1.gz.b64", "nbcols2.gz.b64"]);

/** Decode what Python sent: a plain report, or {format: "nbcols2.gz.b64", data}. Async. */
export async function decodeReport(data) {
  if (typeof data === "string") data = JSON.parse(data);
  if (data && data.schema) return data;
  if (data && FORMATS.has(data.format)) {
    const raw = atob(data.data);
    const bin = new Uint8Array(raw.length);
    for (let i = 0; i < raw.length; i++) bin[i] = raw.charCodeAt(i);
    const stream = new Blob([bin]).stream().pipeThrough(new DecompressionStream("gzip"));
    return unpack(JSON.parse(await new Response(stream).text()));
  }
  throw new Error("nbcompile: this is not an nbcompile report (format " + (data && data.format) + ")");
}

// Inverse of nbcompile.report.html._encode: column-stored record lists (a $like column is an
// earlier column but at the rows listed), index-delta edges, ids as prefix + deltas, repeated
// strings as a table and indices ($tab; $tabs for lists of them).
function unpack(obj) {
  if (Array.isArray(obj)) return obj.map(unpack);
  if (obj === null || typeof obj !== "object") return obj;
  if (obj.$dict) return Object.fromEntries(obj.$dict.map(([k, v]) => [k, unpack(v)]));
  if ("$ids" in obj) {
    let n = 0;
    return obj.d.map((d) => obj.$ids + String((n += d)));
  }
  if ("$tab" in obj) return obj.i.map((i) => obj.$tab[i]);
  if ("$tabs" in obj) return obj.i.map((row) => row.map((i) => obj.$tabs[i]));
  if (obj.$cols) {
    const isLike = (v) => v !== null && typeof v === "object" && !Array.isArray(v) && "$like" in v;
    const plain = new Map();
    for (const [k, v] of Object.entries(obj.$cols)) if (!isLike(v)) plain.set(k, unpack(v));
    const column = (k, v) => {
      if (!isLike(v)) return plain.get(k);
      const col = plain.get(v.$like).slice();
      let i = 0;
      v.at.forEach((d, j) => { i += d; col[i] = v.v[j]; });
      return col;
    };
    const cols = Object.entries(obj.$cols).map(([k, v]) => [k, column(k, v), new Set((obj.$absent || {})[k] || [])]);
    const out = new Array(obj.$n);
    for (let i = 0; i < obj.$n; i++) {
      const r = {};
      for (const [k, col, absent] of cols) if (!absent.has(i)) r[k] = col[i];
      out[i] = r;
    }
    return out;
  }
  const out = {};
  for (const [k, v] of Object.entries(obj)) if (k !== "edges") out[k] = unpack(v);
  if ("edges" in obj) out.edges = obj.edges && obj.edges.$edges ? unpackEdges(obj.edges, out.nodes || []) : unpack(obj.edges);
  return out;
}

function unpackEdges(enc, nodes) {
  const own = new Map();
  const rest = unpack(enc.rest);
  enc.own.forEach((i, j) => own.set(i, rest[j]));
  const edges = new Array(enc.dst.length);
  let d = 0;
  for (let i = 0; i < enc.dst.length; i++) {
    d = i === 0 ? enc.dst[0] : d + enc.dst[i];
    const src = nodes[d - enc.src[i]];
    const e = { src: src.id, dst: nodes[d].id };
    Object.assign(e, own.has(i) ? own.get(i) : { bytes: src.bytes, shape: src.shape });
    edges[i] = e;
  }
  return edges;
}

export function isScalarShape(shape) {
  return typeof shape === "string" && /^[a-z0-9]+\[\]$/i.test(shape.trim());
}

function isLabelNode(n) {
  return n.kind === "param" || (n.kind === "const" && (isScalarShape(n.shape) || (n.bytes ?? 1e9) <= 8));
}

/** Index one report graph for drawing. */
export function prepareGraph(graph, report) {
  const nodes = graph.nodes || [];
  // the train step's kernels (`--grad`: the value_and_grad program) are its own fusions'
  const step = graph === report.graphs?.gradient_compiled;
  const fusionById = new Map(((step ? report.gradient_fusions : report.fusions) || []).map((f) => [f.id, f]));
  const isCompiled = step || graph === report.graphs?.compiled;
  const byId = new Map(), index = new Map(), labels = new Set(), folded = new Set();
  nodes.forEach((n, i) => {
    byId.set(n.id, n);
    index.set(n.id, i);
    if (isLabelNode(n)) labels.add(n.id);
    else if (isCompiled && zeroCost(n, fusionById)) folded.add(n.id);
  });
  // a zero-cost kernel (bitcast, copy, tuple) is folded into its neighbours: its consumers read
  // what it read
  const into = new Map();
  if (folded.size) for (const e of graph.edges || []) if (folded.has(e.dst)) push(into, e.dst, e.src);
  const sourcesOf = (id, seen = new Set()) => {
    if (!folded.has(id)) return [id];
    if (seen.has(id)) return [];
    seen.add(id);
    return (into.get(id) || []).flatMap((p) => sourcesOf(p, seen));
  };
  const preds = new Map(), succs = new Map(), inLabels = new Map(), labelUsers = new Map();
  const edges = [];
  for (const e of graph.edges || []) {
    if (!byId.has(e.src) || !byId.has(e.dst) || labels.has(e.dst) || folded.has(e.dst)) continue;
    for (const src of folded.has(e.src) ? [...new Set(sourcesOf(e.src))] : [e.src]) {
      if (!byId.has(src)) continue;
      if (labels.has(src)) {
        push(inLabels, e.dst, src);
        push(labelUsers, src, e.dst);
        continue;
      }
      edges.push(src === e.src ? e : { ...e, src });
      push(preds, e.dst, src);
      push(succs, src, e.dst);
    }
  }
  for (const id of folded) labels.add(id); // not drawn (and not a label on its consumers)
  const fusionNodes = new Map();
  for (const n of nodes) if (n.fusion && !labels.has(n.id)) push(fusionNodes, n.fusion, n.id);
  const pg = { graph, report, fusionById, isCompiled, nodes, byId, index, labels, folded, preds, succs, inLabels, labelUsers, edges, fusionNodes };
  buildTree(pg);
  for (const g of pg.groups.values()) g.unit = isCompiled ? "kernels" : "ops";
  nameClasses(pg);
  return pg;
}

/** Each module group's class where the model library gives it (report.module_classes, by
 * module path: the scope groups above it and itself, a backward twin as its forward group). */
function nameClasses(pg) {
  const classes = pg.report?.module_classes;
  if (!classes || !Object.keys(classes).length) return;
  for (const g of pg.groups.values()) {
    if (g.kind !== "scope") continue;
    const path = [];
    for (let a = g; a && a.id !== ""; a = pg.groups.get(a.parent)) if (a.kind === "scope") path.unshift(a.label.replace(/ \(backward\)$/, ""));
    const cls = classes[path.join("/")];
    if (cls) g.cls = cls;
  }
}

/** What a group is, in a word for its frame: a module's class (`Block`; `module` where the
 * label is the class already), else its kind (`function`, `scope`, `loop`). */
export function groupKind(g) {
  if (!g.cls) return g.kind;
  return g.cls === g.label.replace(/ \(backward\)$/, "") ? "module" : g.cls;
}

// instructions that run no kernel (analysis/compiled.py FREE_OPS): not counted as kernels
const NO_KERNEL = new Set(["parameter", "constant", "tuple", "get-tuple-element", "bitcast", "after-all", "add-dependency",
  "opt-barrier", "domain", "partition-id", "replica-id"]);

/** What a graph's status line counts, as the header and the Stats tab count it: a traced
 * graph's primitive ops (a nested call's wrapper is none: summary.traced_ops), a compiled
 * graph's kernels (fusions and the instructions that run: summary.kernels). */
export function unitCount(pg) {
  let k = 0;
  for (const n of pg.nodes) {
    if (pg.isCompiled ? n.kind === "fusion" || (n.kind === "op" && !NO_KERNEL.has(n.opcode || n.op)) : n.kind === "op") k++;
  }
  return k;
}

// a kernel that moves no data of its own: XLA's bitcasts, copies, reshapes and tuples
const ZERO_COST = new Set(["bitcast", "copy", "reshape", "tuple", "get-tuple-element"]);
function zeroCost(n, fusionById) {
  if (n.kind !== "op" && n.kind !== "fusion") return false;
  const f = n.fusion ? fusionById.get(n.fusion) : null;
  const ops = f ? f.ops || [] : [n.opcode || n.op];
  return ops.length > 0 && ops.every((o) => ZERO_COST.has(o));
}

function push(map, k, v) {
  const a = map.get(k);
  if (a) a.push(v); else map.set(k, [v]);
}

function buildTree(pg) {
  const groups = new Map();
  const root = mkGroup("", "all", "root", null);
  groups.set("", root);
  const drawn = pg.nodes.filter((n) => !pg.labels.has(n.id));
  const explicit = (pg.graph.groups || []).length > 0 && drawn.some((n) => n.group);
  const nodeGroup = new Map();
  pg.across = new Map(); // node id -> the calls a kernel fused across (it sits on their boundary)
  if (explicit) {
    for (const g of pg.graph.groups) groups.set(g.id, Object.assign(mkGroup(g.id, g.label, g.kind, g.parent || ""), { call: g.call || null }));
    for (const n of drawn) nodeGroup.set(n.id, groups.has(n.group) ? n.group : "");
    gatherOutputs(pg, drawn, nodeGroup);
  } else {
    const sites = new Map();
    for (const n of drawn) {
      const calls = callPaths(pg, n);
      if (calls.length) sites.set(n.id, callSite(calls));
    }
    // a kernel XLA left without the user's names (a broadcast, an iota) sits with its neighbour
    if (sites.size && pg.isCompiled) {
      const bare = (n) => !sites.has(n.id) && (n.kind === "op" || n.kind === "fusion") && !n.path;
      for (const n of [...drawn].reverse()) {
        const nb = bare(n) && (pg.succs.get(n.id) || []).find((id) => sites.has(id));
        if (nb) sites.set(n.id, sites.get(nb));
      }
      for (const n of drawn) {
        const nb = bare(n) && (pg.preds.get(n.id) || []).find((id) => sites.has(id));
        if (nb) sites.set(n.id, sites.get(nb));
      }
    }
    const shared = new Map(); // kernels on one boundary
    for (const st of sites.values()) if (st.next.length > 1) shared.set(st.key, (shared.get(st.key) || 0) + 1);
    // with calls known, more than GATHER kernels outside them are one group (two in a train
    // step: forward, backward), not a row of boxes
    const top = (n) => (!sites.has(n.id) && !n.path) || (sites.has(n.id) && !sites.get(n.id).prefix.length && sites.get(n.id).next.length < 2);
    const outside = sites.size ? drawn.filter((n) => n.kind !== "output" && top(n)) : [];
    if (outside.length > (pg.isCompiled ? LOOSE : GATHER)) {
      for (const n of outside) {
        const back = n.phase === "backward";
        const gid = back ? "x:b" : "x:";
        if (!groups.has(gid)) groups.set(gid, mkGroup(gid, back ? "outside your calls (backward)" : "outside your calls", "rest", ""));
        nodeGroup.set(n.id, gid);
      }
    }
    for (const n of drawn) {
      if (nodeGroup.has(n.id)) continue;
      if (sites.has(n.id)) {
        nodeGroup.set(n.id, callGroup(pg, groups, n, sites.get(n.id), shared));
        continue;
      }
      const segs = String(n.path || "").split("/").filter(Boolean);
      let parent = "";
      for (let i = 0; i < segs.length; i++) {
        const gid = "p:" + segs.slice(0, i + 1).join("/");
        if (!groups.has(gid)) groups.set(gid, mkGroup(gid, segs[i], "scope", parent));
        parent = gid;
      }
      nodeGroup.set(n.id, parent);
    }
  }
  for (const g of groups.values()) {
    if (g.id === "") continue;
    if (!groups.has(g.parent)) g.parent = "";
  }
  const childGroups = new Map();
  for (const g of groups.values()) if (g.id !== "") push(childGroups, g.parent, g.id);
  for (const n of drawn) groups.get(nodeGroup.get(n.id)).items.push({ type: "node", id: n.id, first: pg.index.get(n.id) });
  // Post-order: stats, drop empty groups, attach non-empty subgroups as items.
  const visit = (g) => {
    for (const cid of childGroups.get(g.id) || []) {
      const c = groups.get(cid);
      visit(c);
      if (c.count > 0) g.items.push({ type: "group", id: cid, first: c.first });
      else groups.delete(cid);
    }
    for (const it of g.items) {
      if (it.type === "node") addNodeStats(g, pg.byId.get(it.id), pg.index.get(it.id));
      else mergeStats(g, groups.get(it.id));
    }
    g.items.sort((a, b) => a.first - b.first);
  };
  visit(root);
  // Collapse chains of single-child wrappers at the top is left to the initial expansion.
  // A container with more than CHUNK_MAX children is split, in program order, into at most
  // CHUNK_FANOUT chunks (of at least CHUNK children each), recursively: a 2,500-op program shows
  // 20 chunks first, not 50, and each expansion stays within CHUNK_MAX boxes.
  let chunkId = 0;
  const work = [...groups.values()];
  while (work.length) {
    const g = work.shift();
    if (g.items.length <= CHUNK_MAX) continue;
    const items = g.items;
    const size = Math.max(CHUNK, Math.ceil(items.length / CHUNK_FANOUT));
    g.items = [];
    for (let i = 0; i < items.length; i += size) {
      const part = items.slice(i, i + size);
      const c = mkGroup(`chunk:${chunkId++}`, "", "chunk", g.id);
      c.items = part;
      for (const it of part) {
        if (it.type === "node") addNodeStats(c, pg.byId.get(it.id), it.first);
        else { mergeStats(c, groups.get(it.id)); groups.get(it.id).parent = c.id; }
      }
      c.run = callRun(groups, part);
      const calls = c.run && c.run.n > 1 ? `${c.run.name}#${c.run.lo}–#${c.run.hi} (${c.run.n} calls) · ` : "";
      c.label = `${calls}${topOps(c, 2).join(", ")} … (${i + 1}–${i + part.length} of ${items.length})`;
      groups.set(c.id, c);
      g.items.push({ type: "group", id: c.id, first: c.first });
      work.push(c);
    }
  }
  const parentOf = new Map();
  for (const g of groups.values()) for (const it of g.items) parentOf.set((it.type === "node" ? "n:" : "g:") + it.id, g.id);
  pg.groups = groups;
  pg.root = root;
  pg.parentOf = parentOf; // unit key -> containing group id ("" = root)
}

/** Where a kernel sits among the user's groups: the paths of its ops through the user's calls
 * and modules as they nest (`Transformer/blocks_0/attn`, `loss#1/block#3`; analysis/calls.py),
 * else its own call paths, else its fusion's. */
function callPaths(pg, n) {
  if (Array.isArray(n.scopes)) return n.scopes;
  if (Array.isArray(n.calls)) return n.calls;
  const f = n.fusion ? pg.fusionById.get(n.fusion) : null;
  return f && Array.isArray(f.functions) ? f.functions : [];
}

/** Where a kernel's call paths meet: {prefix (their longest common path), next (the calls
 * below it they come from), key}. */
function callSite(calls) {
  let paths = calls.map((c) => String(c).split("/").filter(Boolean));
  // forward ops fused into a backward kernel are recomputed for it: the kernel is the backward
  // group's (`layer#3` + `layer#3 (backward)` sits in `layer#3 (backward)`)
  if (paths.some((p) => p.some((s) => s.endsWith(BACKWARD)))) paths = paths.map((p) => p.map((s) => (s.endsWith(BACKWARD) ? s : s + BACKWARD)));
  let k = 0;
  while (paths.every((p) => k < p.length && p[k] === paths[0][k])) k++;
  const next = [...new Set(paths.filter((p) => p.length > k).map((p) => p[k]))];
  let prefix = paths[0].slice(0, k);
  if (prefix.length > MAX_DEPTH) {
    // as scope paths (graphmodel.MAX_DEPTH): the deeper calls and scopes in one group
    const rest = prefix.slice(MAX_DEPTH - 1);
    prefix = [...prefix.slice(0, MAX_DEPTH - 1), `${rest.length} nested scopes: ${rest.join("/")}`];
  }
  return { prefix, next, key: prefix.join("/") + "\u0001" + next.join(" + ") };
}

const CALL_LABEL = /#\d+( \(backward\))?$/;
const MAX_DEPTH = 64; // nbcompile/report/graphmodel.py MAX_DEPTH
const BACKWARD = " (backward)";

/** The group of a kernel: the call holding all its ops, one group per call (ids "c:" + path).
 * A kernel whose ops come from several calls sits there, on their boundary, and `pg.across`
 * names them; several kernels on one boundary are one group of their own ("⇄ a + b"). */
function callGroup(pg, groups, n, site, shared) {
  const { prefix, next } = site;
  let parent = "";
  for (let i = 0; i < prefix.length; i++) {
    const gid = "c:" + prefix.slice(0, i + 1).join("/");
    if (!groups.has(gid)) {
      // a call of the user's function is numbered (`layer#3`); a module or scope is not
      const call = CALL_LABEL.test(prefix[i]);
      groups.set(gid, Object.assign(mkGroup(gid, prefix[i], call ? "function" : "scope", parent), { call: call ? "call" : null }));
    }
    parent = gid;
  }
  if (next.length > 1) {
    pg.across.set(n.id, next);
    if (shared.get(site.key) > 1) {
      const gid = "x:" + site.key;
      if (!groups.has(gid)) groups.set(gid, mkGroup(gid, "⇄ " + next.join(" + "), "across", parent));
      parent = gid;
    }
  }
  return parent;
}

/** In a gradient program, or one with more than GATHER outputs, an output (a parameter's
 * gradient, an updated parameter) made inside one group is drawn in that group: no row of N
 * output boxes, each gradient at the backward call that made it. */
const GATHER = 8;
/** More kernels than this outside the user's calls: gathered (a row of them would be wider than
 * the canvas at a legible size). */
const LOOSE = 4;
function gatherOutputs(pg, drawn, nodeGroup) {
  const loose = drawn.filter((n) => n.kind === "output" && !nodeGroup.get(n.id)).length;
  if (loose <= GATHER && !drawn.some((n) => n.phase === "backward")) return;
  for (const n of drawn) {
    if (n.kind !== "output" || nodeGroup.get(n.id)) continue;
    const from = new Set((pg.preds.get(n.id) || []).map((p) => nodeGroup.get(p)));
    const [gid] = from;
    if (from.size === 1 && gid) nodeGroup.set(n.id, gid);
  }
}

/** A chunk's repeated calls, folded (issue 41: a function called 10^4 times): where every group
 * it holds is a call of one function (`cheap#1` … `cheap#150`, or chunks of them), {name, lo,
 * hi, n}; else null. Ops outside the calls (the sum joining them) do not break the run. */
function callRun(groups, items) {
  let run = null;
  for (const it of items) {
    if (it.type !== "group") continue;
    const g = groups.get(it.id);
    let r = null;
    if (g.kind === "chunk") r = g.run || null;
    else if (g.call === "call") {
      const m = /^(.*)#(\d+)$/.exec(g.label || "");
      if (m) r = { name: m[1], lo: +m[2], hi: +m[2], n: 1 };
    }
    if (!r || (run && run.name !== r.name)) return null;
    run = run ? { name: run.name, lo: Math.min(run.lo, r.lo), hi: Math.max(run.hi, r.hi), n: run.n + r.n } : r;
  }
  return run;
}

function mkGroup(id, label, kind, parent) {
  return { id, label, kind, parent, items: [], count: 0, flops: 0, bytes: 0, first: Infinity,
    ops: new Map(), phases: { forward: 0, backward: 0, mixed: 0 }, lineMin: Infinity, lineMax: -Infinity };
}

function addNodeStats(g, n, i) {
  g.count += 1;
  g.flops += n.flops || 0;
  g.bytes += n.bytes || 0;
  g.first = Math.min(g.first, i);
  g.ops.set(n.op, (g.ops.get(n.op) || 0) + 1);
  if (n.phase && n.phase in g.phases) g.phases[n.phase] += 1;
  if (n.line != null) { g.lineMin = Math.min(g.lineMin, n.line); g.lineMax = Math.max(g.lineMax, n.line); }
}

function mergeStats(g, c) {
  g.count += c.count;
  g.flops += c.flops;
  g.bytes += c.bytes;
  g.first = Math.min(g.first, c.first);
  for (const [op, k] of c.ops) g.ops.set(op, (g.ops.get(op) || 0) + k);
  for (const p in c.phases) g.phases[p] += c.phases[p];
  g.lineMin = Math.min(g.lineMin, c.lineMin);
  g.lineMax = Math.max(g.lineMax, c.lineMax);
}

// What a kernel does, in a word: its most telling op (a matmul before the adds fused into it).
const OP_WORDS = { dot: "matmul", convolution: "conv", "reduce-window": "pool", reduce: "reduce", scatter: "scatter",
  gather: "gather", exponential: "exp", logistic: "sigmoid", "select-and-scatter": "pool grad", sort: "sort" };
const PLAIN = new Set(["parameter", "constant", "bitcast", "broadcast", "reshape", "copy", "convert", "tuple",
  "get-tuple-element", "iota", "slice", "concatenate", "pad", "transpose", "dynamic-slice", "dynamic-update-slice"]);

/** A kernel's box title, in the user's words: the call or module it sits in and what it does
 * (`layer#3 · matmul`, `blocks_0 · gelu`, `loss · log_softmax`); XLA's name is its second line. */
export function kernelTitle(pg, n) {
  const f = n.fusion ? pg.fusionById.get(n.fusion) : null;
  const ops = f?.ops?.length ? f.ops : [n.opcode || n.op];
  let what;
  if (Array.isArray(n.lib) && n.lib.length) what = n.lib.slice(0, 2).join("+");
  else {
    const telling = ops.find((o) => OP_WORDS[o] && o !== "reduce") || ops.find((o) => o === "reduce");
    const rest = [...new Set(ops.filter((o) => !PLAIN.has(o)))];
    what = telling ? OP_WORDS[telling] : rest.length ? rest.slice(0, 2).join("+") : ops[0] || n.op;
  }
  let g = pg.groups?.get(pg.parentOf?.get("n:" + n.id) || "");
  while (g && g.id !== "" && ["chunk", "across", "rest"].includes(g.kind)) g = pg.groups.get(g.parent);
  const across = pg.across?.get(n.id);
  const where = across ? across.join(" + ") : g && g.id !== "" ? g.label : pg.report?.name || "";
  return where ? `${where} · ${what}` : what;
}

/** The line an op or kernel was written on, short: the compiling cell's `L4`, another cell's
 * or file's `In [2] line 7` (a function's own line, not the compiling cell's line that called
 * it); the call site where no own line is known. */
export function nodeLine(pg, n) {
  if (n.file && n.file_line != null && n.file === pg.report?.source?.filename) return `L${n.file_line}`;
  if (n.loc) return n.loc;
  return n.line != null ? `L${n.line}` : "";
}

/** The k most frequent ops of a group. */
export function topOps(g, k) {
  return [...g.ops.entries()].sort((a, b) => b[1] - a[1]).slice(0, k).map(([op]) => op);
}

/** Majority phase of a group, or null. */
export function groupPhase(g) {
  const { forward, backward, mixed } = g.phases;
  if (forward + backward + mixed === 0) return null;
  if (mixed > 0 || (forward > 0 && backward > 0)) return forward >= 2 * backward ? "forward" : backward >= 2 * forward ? "backward" : "mixed";
  return forward > 0 ? "forward" : "backward";
}

/** Group ids from the root down to (excluding) the unit with this key. */
export function ancestors(pg, key) {
  const out = [];
  let gid = pg.parentOf.get(key);
  while (gid !== undefined && gid !== "") {
    out.push(gid);
    gid = pg.parentOf.get("g:" + gid);
  }
  return out.reverse();
}

/** Nodes ids (drawn) related to a node: for labels, their consumers. */
export function drawnTargets(pg, id) {
  if (pg.labels.has(id)) return pg.labelUsers.get(id) || [];
  return pg.byId.has(id) ? [id] : [];
}
