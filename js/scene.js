// What one graph view draws, as plain data (no DOM): the visible boxes (nodes, collapsed groups,
// expanded groups as frames), laid out as nested layered boxes, and every edge as a polyline
// that runs only between boxes.
//
// An edge between two visible units is drawn in the innermost box that holds both (its lowest
// common ancestor): there it is an edge between two children, laid out with dummy nodes. Where
// an end lies inside an expanded group, the group gets a port on its top or bottom border and a
// channel from the port to the child holding the end (layout.js), recursively, so a route is:
// from the upper end up and out through its groups' bottom ports, across the common box, then in
// through the lower end's groups' top ports. Pure and deterministic: nbcompile/report/scene.py is
// its port for the static picture.

import { bottomPort, edgeKey, followRank, GAP, layoutBox, mirrorRank, rank, topPort } from "./layout.js";
import { loopLeafLines } from "./loops.js";
import { ancestors, groupKind, groupPhase, kernelTitle, nodeLine } from "./model.js";
import { fmtNum, trunc } from "./util.js";

export const CH = 6.7; // px per character of the 11px monospace label font
export const LINE = 14;
export const PAD = 10;
export const HEADER = 22;
export const MAXW = 250;

/** Chunks (program-order slices of a flat program) open at first only while the picture stays
 * this small: their contents are there on demand, the first view stays readable. */
export const CHUNK_LIMIT = 40;

/** The first picture (the whiteboard picture): the user's calls and modules, opened level by
 * level while at most FIRST_LIMIT boxes are drawn (one group alone may open up to the budget);
 * the Gradient tab, two facing columns, up to INITIAL_LIMIT. nbcompile/report/svg.py draws the same. */
export const FIRST_LIMIT = 25;
export const INITIAL_LIMIT = 60;
export const BUDGET = 400;

/** A group the user wrote: a call of their own function, a module or named scope, a loop, a
 * nested jit around such groups; not a library call (`gelu`), a nested jit of ops alone
 * (jax.numpy's own: `_take`, `_where`), a custom-derivative wrapper or a program chunk. */
export function isUserGroup(pg, g) {
  if (g.kind === "function") return g.call === "call" || (g.call == null && holdsUserGroups(pg, g));
  return g.call !== "library" && !["custom", "chunk", "across", "rest", "branch"].includes(g.kind);
}

/** Opening `g` shows more of the user's own structure: it holds a call or module of theirs
 * (a wrapper holding one group opens only where that group does). */
function holdsUserGroups(pg, g) {
  const memo = (pg.holdsMemo ??= new Map());
  // bottom-up without recursion: a chain of single groups is as deep as the user's scopes
  const stack = [[g, false]];
  while (stack.length) {
    const [h, ready] = stack.pop();
    if (memo.has(h.id)) continue;
    const subs = h.items.filter((it) => it.type === "group").map((it) => pg.groups.get(it.id));
    if (!ready) {
      stack.push([h, true]);
      for (const c of subs) if (!memo.has(c.id)) stack.push([c, false]);
      continue;
    }
    memo.set(h.id, subs.some((x) => isUserGroup(pg, x)) && (h.items.length > 1 || memo.get(subs[0].id)));
  }
  return memo.get(g.id);
}

/** Whether a group is the backward twin of a forward group beside it (scene.py: _is_twin). */
function isTwin(label, labels) {
  if (label.endsWith(" (backward)")) return labels.has(label.slice(0, -" (backward)".length));
  return label.startsWith("transpose(jvp(") && label.endsWith("))") && labels.has(label.slice("transpose(jvp(".length, -2));
}

/** Group ids to expand first: breadth-first, whole depth levels while they fit `limit` boxes;
 * where a level does not fit, its groups other than chunks when they do (the program's own
 * groups first: chunks open on demand), else those other than the backward twins of forward
 * calls (a train step's `loss_fn` opens, `transpose(jvp(loss_fn))` stays one box). A library call the user made (`gelu`, `var`) stays one
 * collapsed box. With `userOnly` (the first picture) a group opens only where it holds the
 * user's own calls or modules: `mlp#1` opens to `layer#1…#10`, each `layer#k` stays a box
 * (where that leaves fewer than 5 boxes and nothing open, whole levels open as without it). */
export function initialExpansion(pg, limit, budget, chunkLimit = CHUNK_LIMIT, userOnly = true, pairs = false) {
  const expanded = new Set();
  let level = [pg.root];
  let count = pg.root.items.length;
  const extraOf = (groups) => groups.reduce((k, g) => k + g.items.length - 1, 0);
  const fits = (groups) => {
    const extra = extraOf(groups);
    const cap = groups.every((g) => g.kind === "chunk") ? Math.min(limit, chunkLimit) : limit;
    // one group alone, or (`pairs`: the Gradient tab) one call with its backward group, may
    // open up to the budget
    const one = groups.length === 1 || (pairs && groups.length === 2 && [`${groups[0].label} (backward)`, `transpose(jvp(${groups[0].label}))`].includes(groups[1].label));
    return groups.length > 0 && (count + extra <= cap || (one && count + extra <= budget));
  };
  while (level.length) {
    let groups = level.flatMap((g) => g.items.filter((it) => it.type === "group").map((it) => pg.groups.get(it.id)))
      .filter((g) => g.call !== "library" && (!userOnly || g.kind === "chunk" || holdsUserGroups(pg, g)));
    if (!fits(groups)) {
      const own = groups.filter((g) => g.kind !== "chunk");
      if (own.length < groups.length && fits(own)) groups = own;
      else {
        // a train step: the forward calls open, their backward twins stay one box each
        // (`loss_fn` opens to its layers beside `transpose(jvp(loss_fn))`)
        const labels = new Set(own.map((g) => g.label));
        const fwd = own.filter((g) => !isTwin(g.label, labels));
        if (fwd.length === own.length || !fits(fwd)) break;
        groups = fwd;
      }
    }
    const extra = extraOf(groups);
    groups.forEach((g) => expanded.add(g.id));
    count += extra;
    level = groups;
  }
  // a program with no structure of the user's below its top (one call, `predict`): its contents
  if (userOnly && !expanded.size && count < 5) return initialExpansion(pg, limit, budget, chunkLimit, false, pairs);
  return expanded;
}

/** The unit (drawn box key) a node belongs to: itself, or its outermost collapsed group. */
export function unitKey(pg, expanded, nodeId) {
  for (const gid of ancestors(pg, "n:" + nodeId)) if (!expanded.has(gid)) return "g:" + gid;
  return "n:" + nodeId;
}

/** Lines of text and size of a leaf box (a node or a collapsed group). */
export function leafText(pg, c) {
  let lines;
  if (c.node) {
    const n = c.node;
    const fusion = pg.isCompiled && n.fusion ? pg.fusionById.get(n.fusion) : null;
    const ins = (pg.inLabels.get(n.id) || []).map((id) => pg.byId.get(id).label || id);
    const own = nodeLine(pg, n), where = own ? " · " + own : "";
    if (fusion || n.kind === "fusion" || (pg.isCompiled && n.kind === "op")) {
      // a kernel: where it came from in the user's words, then XLA's name (and the library
      // that runs it)
      lines = [kernelTitle(pg, n), `${n.label || n.op}${fusion ? " · " + (fusion.library || fusion.kind) : ""}`, (n.shape || "") + where];
    } else {
      lines = [n.label && n.label !== n.op ? `${n.op} ${n.label}` : n.op, (n.shape || "") + where];
    }
    const across = pg.across?.get(n.id);
    if (across) lines.push("⇄ across " + across.join(" + "));
    if (ins.length) lines.push("← " + ins.slice(0, 3).join(", ") + (ins.length > 3 ? ` +${ins.length - 3}` : ""));
  } else {
    const g = c.group;
    const lr = g.lineMin <= g.lineMax ? ` · L${g.lineMin}${g.lineMax > g.lineMin ? "–" + g.lineMax : ""}` : "";
    const summary = groupSummary(pg, g);
    lines = [`▸ ${g.label}`, `${g.kind === "chunk" || g.kind === "rest" ? "" : groupKind(g) + " · "}${fmtNum(g.count)} ${pg.isCompiled ? "kernels" : "ops"}${lr}`,
      ...(summary ? [summary] : []), ...loopLeafLines(pg, g)];
  }
  const maxChars = Math.floor((MAXW - 14) / CH);
  lines = lines.map((t) => trunc(t, maxChars));
  const w = Math.min(MAXW, Math.max(70, Math.max(...lines.map((t) => t.length)) * CH + 14));
  return { lines, w, h: lines.length * LINE + 8 };
}

/** A collapsed group's last line, what a whiteboard says of a layer: the shape of its output
 * (its last op's or kernel's) and the parameters it reads (`(16, 32) · 1.06K params`: elements
 * of the model's parameter arrays, report.param_args, a backward group counting its forward
 * twin's too). A part not known is left out (no parameters said: none known); a compiled group
 * with neither says its flops (XLA); "" where nothing is known. */
export function groupSummary(pg, g) {
  const read = groupParams(pg), params = new Set();
  let last = null;
  const walk = (grp, own) => {
    for (const it of grp.items) {
      if (it.type === "group") { walk(pg.groups.get(it.id), own); continue; }
      const n = pg.byId.get(it.id);
      if (own && COMPUTES.has(n.kind) && n.shape && (!last || it.first > last.first)) last = { first: it.first, shape: n.shape };
      for (const id of pg.inLabels.get(n.id) || []) if (read.has(id)) params.add(id);
    }
  };
  walk(g, true);
  const twin = read.size && g.label.endsWith(BACKWARD) ? forwardTwin(pg, g) : null;
  if (twin) walk(twin, false);
  let count = 0;
  for (const id of params) count += elements(pg.byId.get(id).shape);
  const parts = [];
  const shape = last ? shapeText(last.shape) : "";
  if (shape) parts.push(shape);
  if (count) parts.push(`${fmtNum(count)} params`);
  if (!parts.length && pg.isCompiled && g.flops) parts.push(`${fmtNum(g.flops)} flops (XLA)`);
  return parts.join(" · ");
}

const COMPUTES = new Set(["op", "call", "fusion"]); // nodes whose result is a group's output

/** The label nodes that are the model's parameters: program inputs of the arguments the report
 * names in param_args (a model's parameters, the differentiated arguments of `--grad`), known
 * by their label's root (`params[0]['w']`, `model.layers[0].weight`). */
function groupParams(pg) {
  if (pg.paramIds) return pg.paramIds;
  const args = new Set(pg.report?.param_args || []);
  pg.paramIds = new Set();
  if (args.size) for (const id of pg.labels) {
    const n = pg.byId.get(id);
    if (n.kind === "param" && args.has(String(n.label || "").split(/[.[]/, 1)[0])) pg.paramIds.add(id);
  }
  return pg.paramIds;
}

/** The forward group a backward group differentiates: the same path of labels, without
 * " (backward)" (`mlp#1 (backward)/layer#3 (backward)` -> `mlp#1/layer#3`), or null. */
function forwardTwin(pg, g) {
  if (!pg.byPath) {
    pg.byPath = new Map();
    for (const h of pg.groups.values()) if (h.id !== "") pg.byPath.set(groupPath(pg, h), h);
  }
  const twin = pg.byPath.get(groupPath(pg, g).split("/").map((p) => (p.endsWith(BACKWARD) ? p.slice(0, -BACKWARD.length) : p)).join("/"));
  return twin && twin !== g ? twin : null;
}

/** An array type as a whiteboard writes its shape: `f32[16,32]{1,0}` -> `(16, 32)`, a scalar
 * `scalar`; a tuple of arrays, its first. */
export function shapeText(shape) {
  const m = /\[([^\]]*)\]/.exec(String(shape || ""));
  if (!m) return "";
  const dims = m[1].split(",").map((d) => d.trim()).filter(Boolean);
  return dims.length ? `(${dims.join(", ")}${dims.length === 1 ? "," : ""})` : "scalar";
}

/** Elements of an array shape `f32[16,32]{1,0}` (a scalar: 1). */
function elements(shape) {
  const m = /\[([^\]]*)\]/.exec(String(shape || ""));
  if (!m) return 0;
  return m[1].split(",").filter((d) => d.trim()).reduce((k, d) => k * (Number.parseInt(d, 10) || 0), 1);
}

/**
 * The scene for `expanded` group ids: {root (tree of boxes), boxes: Map(key -> box), edges:
 * [{u, v, count, bytes, up, points: [[x, y], ...]}], unitOf: Map(node id -> unit key)}.
 * Boxes: {key, x, y, w, h, node | group, lines (leaves), children (expanded groups), title}.
 */
export function buildScene(pg, expanded) {
  const unitOf = new Map();
  for (const n of pg.nodes) if (!pg.labels.has(n.id)) unitOf.set(n.id, unitKey(pg, expanded, n.id));
  const tree = buildTree(pg, expanded, pg.root, "root");
  const aggMap = new Map();
  for (const e of pg.edges) {
    const u = unitOf.get(e.src), v = unitOf.get(e.dst);
    if (!u || !v || u === v) continue;
    const k = edgeKey(u, v);
    const a = aggMap.get(k);
    if (a) { a.count++; a.bytes += e.bytes || 0; } else aggMap.set(k, { u, v, count: 1, bytes: e.bytes || 0 });
  }
  const agg = [...aggMap.values()];
  // Each edge in its lowest common box, between two children of that box.
  const boxEdges = new Map();
  for (const a of agg) {
    const au = ancestors(pg, a.u), av = ancestors(pg, a.v);
    let i = 0;
    while (i < au.length && i < av.length && au[i] === av[i]) i++;
    a.box = i === 0 ? "root" : "g:" + au[i - 1];
    a.cu = [...au.slice(i).map((g) => "g:" + g), a.u];
    a.cv = [...av.slice(i).map((g) => "g:" + g), a.v];
    (boxEdges.get(a.box) || boxEdges.set(a.box, []).get(a.box)).push([a.cu[0], a.cv[0]]);
  }
  // outputs the backward pass made (the gradients)
  const backOut = new Set(pg.nodes.filter((n) => n.kind === "output" && (pg.preds.get(n.id) || []).some((p) => pg.byId.get(p)?.phase === "backward")).map((n) => n.id));
  const byKey = new Map();
  const index = (box) => { byKey.set(box.key, box); (box.children || []).forEach(index); };
  index(tree);
  for (const box of byKey.values()) {
    if (!box.children) continue;
    const keys = box.children.map((c) => c.key);
    box.mirror = mirrorOf(box, false, backOut);
    box.ranked = box.mirror ? mirrorRank(keys, boxEdges.get(box.key) || [], box.mirror.columns, box.mirror.partner)
      : rank(keys, boxEdges.get(box.key) || []);
    box.ports = { top: [], bottom: [] };
  }
  // A forward group and its backward group both open side by side: the backward group's rows
  // follow the forward group's (both one straight column), so each child faces its partner;
  // and so on down, for each pair of children that are both open (`block#3` inside `loss`).
  // `across`: the children of two boxes that edges join (edgeKey(F, B) -> Map(B's child -> [F's
  // children])), so that an unpaired backward child can face the forward values it reads.
  const across = new Map();
  for (const a of agg) {
    for (let k = 0; k + 1 < a.cu.length && k + 1 < a.cv.length; k++) {
      const m = across.get(edgeKey(a.cu[k], a.cv[k])) || across.set(edgeKey(a.cu[k], a.cv[k]), new Map()).get(edgeKey(a.cu[k], a.cv[k]));
      (m.get(a.cv[k + 1]) || m.set(a.cv[k + 1], []).get(a.cv[k + 1])).push(a.cu[k + 1]);
    }
  }
  const pairUp = (F, B) => {
    if (!F.children || !B.children || F.mirror || B.mirror) return;
    const inner = mirrorOf({ children: [...F.children, ...B.children] }, true, backOut)?.partner;
    if (!inner?.size) return;
    F.ranked.columns = new Map(F.children.map((c) => [c.key, 0]));
    B.ranked = followRank(B.children.map((c) => c.key), boxEdges.get(B.key) || [], inner, F.ranked.layer,
      across.get(edgeKey(F.key, B.key)));
    B.follow = { lead: F, partner: inner };
    F.leads = B;
    for (const [bk, fk] of inner) pairUp(byKey.get(fk), byKey.get(bk));
  };
  for (const box of [...byKey.values()]) for (const [bk, fk] of box.mirror?.partner || []) pairUp(byKey.get(fk), byKey.get(bk));
  // Ports: the upper end leaves its groups at the bottom, the lower end enters at the top.
  const addPorts = (chain, side) => {
    for (let k = 0; k + 1 < chain.length; k++) {
      const p = byKey.get(chain[k]).ports[side];
      if (!p.includes(chain[k + 1])) p.push(chain[k + 1]);
    }
  };
  const pairBytes = new Map(((pg.report?.gradient || {}).pairs || []).map(([f, , b]) => [f, b]));
  for (const a of agg) {
    const common = byKey.get(a.box);
    a.up = common.ranked.reversed.has(edgeKey(a.cu[0], a.cv[0]));
    a.columns = !!(common.mirror || common.follow); // in the facing columns (the backward pass runs up)
    a.flat = !!common.ranked.flat?.some(([p, q]) => (p === a.cu[0] && q === a.cv[0]) || (p === a.cv[0] && q === a.cu[0]));
    // from inside a forward group to inside its backward group beside it: side to side, between
    // the children of the innermost facing pair that hold the two ends (a.depth: that pair's depth)
    a.depth = -1;
    for (let k = 0; k + 1 < a.cu.length && k + 1 < a.cv.length; k++) {
      if (byKey.get(a.cv[k]).follow?.lead.key !== a.cu[k]) break;
      a.depth = k;
    }
    a.cross = a.depth >= 0;
    if (a.cross) a.flat = true;
    // a residual: from a forward call to its own backward group (bytes from gradient.pairs)
    const [fk, bk, pairs] = a.cross ? [a.cu[a.depth + 1], a.cv[a.depth + 1], byKey.get(a.cv[a.depth]).follow.partner]
      : [a.cu[0], a.cv[0], common.mirror?.partner];
    if (pairs?.get(bk) === fk) {
      const f = byKey.get(fk).group;
      a.residual = pairBytes.get(f?.label) ?? pairBytes.get(groupPath(pg, f)) ?? a.bytes;
    }
    if (a.flat) continue; // no ports: drawn straight across
    const [upper, lower] = a.up ? [a.cv, a.cu] : [a.cu, a.cv];
    addPorts(upper, "bottom");
    addPorts(lower, "top");
  }
  const boxAgg = new Map();
  for (const a of agg) if (!a.flat) (boxAgg.get(a.box) || boxAgg.set(a.box, []).get(a.box)).push(a);
  layoutTree(pg, tree, byKey, boxAgg);
  place(tree, 0, 0);
  for (const a of agg) {
    // a sideways line may run through its ends and the groups holding them, through no other box
    const holders = a.flat ? new Set(["root", a.u, a.v, ...[...ancestors(pg, a.u), ...ancestors(pg, a.v)].map((g) => "g:" + g)]) : null;
    a.points = route(byKey, a, holders);
  }
  return { root: tree, boxes: byKey, edges: agg, unitOf };
}

const BACKWARD = " (backward)";

/** Two facing columns for a box holding calls and their backward groups (`block#3` and
 * `block#3 (backward)`): {columns: Map(key -> 0 forward | 1 backward), partner: Map(backward
 * key -> forward key)}, or null (also when the backward side is mostly loose ops, not groups,
 * unless `loose`: inside a facing pair). */
function mirrorOf(box, loose = false, backOut = null) {
  const byLabel = new Map();
  for (const c of box.children) if (c.group) byLabel.set(c.group.label, c.key);
  const partner = new Map();
  for (const c of box.children) {
    const label = c.group?.label || "";
    if (label.endsWith(BACKWARD) && byLabel.has(label.slice(0, -BACKWARD.length))) partner.set(c.key, byLabel.get(label.slice(0, -BACKWARD.length)));
  }
  if (!partner.size) return null;
  const columns = new Map();
  for (const c of box.children) {
    // (a gradient, an output the backward pass made, is the backward column's)
    const back = partner.has(c.key) || (c.group ? c.group.label.endsWith(BACKWARD) || groupPhase(c.group) === "backward"
      : c.node.phase === "backward" || !!backOut?.has(c.node.id));
    columns.set(c.key, back ? 1 : 0);
  }
  const unpaired = box.children.filter((c) => columns.get(c.key) && !partner.has(c.key)).length;
  return unpaired > 3 * partner.size && !loose ? null : { columns, partner };
}

/** A group's labels from the root down: `loss#1/block#3`. */
function groupPath(pg, g) {
  const out = [];
  for (let c = g; c && c.id !== ""; c = pg.groups.get(c.parent)) out.unshift(c.label);
  return out.join("/");
}

function buildTree(pg, expanded, g, key) {
  const children = g.items.map((it) => {
    if (it.type === "node") return { key: "n:" + it.id, node: pg.byId.get(it.id) };
    const c = pg.groups.get(it.id);
    return expanded.has(c.id) ? buildTree(pg, expanded, c, "g:" + c.id) : { key: "g:" + c.id, group: c };
  });
  return { key, group: g, children };
}

function layoutTree(pg, box, byKey, boxAgg) {
  layoutChildren(pg, box, byKey, boxAgg);
  for (const c of box.children) if (c.follow) alignPair(pg, c.follow.lead, c, byKey, boxAgg);
  layoutFrame(box, byKey, boxAgg);
}

/** Size the children of an open group; the two members of a facing pair wait for alignPair. */
function layoutChildren(pg, box, byKey, boxAgg) {
  for (const c of box.children) {
    if (c.follow || c.leads) continue;
    if (c.children) layoutTree(pg, c, byKey, boxAgg);
    else Object.assign(c, leafText(pg, c));
  }
}

/** A facing pair, inside out: its children (and their own facing pairs), then its rows. */
function alignPair(pg, F, B, byKey, boxAgg) {
  layoutChildren(pg, F, byKey, boxAgg);
  layoutChildren(pg, B, byKey, boxAgg);
  for (const c of B.children) if (c.follow) alignPair(pg, c.follow.lead, c, byKey, boxAgg);
  alignRows(F, B, byKey, boxAgg);
}

/** A forward group F and its backward group B side by side: the same top port layer, each
 * layer's band as tall as the taller of the two, so their rows line up. */
function alignRows(F, B, byKey, boxAgg) {
  F.ranked.forceTop = B.ranked.forceTop = F.ports.top.length > 0 || B.ports.top.length > 0;
  layoutFrame(F, byKey, boxAgg);
  layoutFrame(B, byKey, boxAgg);
  const hf = F.inner.bands.map((b) => b.bottom - b.top), hb = B.inner.bands.map((b) => b.bottom - b.top);
  const joint = Array.from({ length: Math.max(hf.length, hb.length) }, (_, i) => Math.max(hf[i] || 0, hb[i] || 0));
  F.ranked.minBands = B.ranked.minBands = joint;
  layoutFrame(F, byKey, boxAgg);
  layoutFrame(B, byKey, boxAgg);
}

/** Lay out one open group's children (already sized) and size the group. */
function layoutFrame(box, byKey, boxAgg) {
  box.inner = layoutBox(box.children.map((c) => ({ key: c.key, w: c.w, h: c.h })), box.ranked, box.ports,
    attachments(box, byKey, boxAgg.get(box.key) || []));
  const root = box.key === "root";
  box.title = root ? "" : `▾ ${trunc(box.group.label, 40)} · ${groupKind(box.group)} · ${fmtNum(box.group.count)} ${box.group.unit || "ops"}`;
  const minW = root ? 0 : box.title.length * CH + 2 * PAD;
  box.w = Math.max(box.inner.width + (root ? 0 : 2 * PAD), minW);
  box.h = box.inner.height + (root ? 0 : HEADER + PAD);
  box.dx = (box.w - box.inner.width) / 2;
  box.oy = root ? 0 : HEADER;
}

/** Port offset (px from the centre) where a path enters / leaves child group `c` towards `q`. */
function portOffset(c, side, q) {
  return (side === "top" ? c.inner.portX.top : c.inner.portX.bottom).get(q) + c.dx - c.w / 2;
}

function mean(values) {
  let s = 0;
  for (const v of values) s += v;
  return values.length ? s / values.length : 0;
}

/** Where this box's edges meet its children that are expanded groups (their ports), averaged. */
function attachments(box, byKey, aggs) {
  const acc = new Map();
  for (const a of aggs) {
    const [upper, lower] = a.up ? [a.cv, a.cu] : [a.cu, a.cv];
    const ek = edgeKey(upper[0], lower[0]);
    const e = acc.get(ek) || acc.set(ek, [[], []]).get(ek);
    e[0].push(upper.length > 1 ? portOffset(byKey.get(upper[0]), "bottom", upper[1]) : 0);
    e[1].push(lower.length > 1 ? portOffset(byKey.get(lower[0]), "top", lower[1]) : 0);
  }
  const out = new Map();
  for (const [ek, [ua, lb]] of acc) out.set(ek, [mean(ua), mean(lb)]);
  for (const k of box.ports.top) {
    const c = byKey.get(k);
    if (c.children) out.set(edgeKey(topPort(k), k), [0, mean(c.ports.top.map((q) => portOffset(c, "top", q)))]);
  }
  for (const k of box.ports.bottom) {
    const c = byKey.get(k);
    if (c.children) out.set(edgeKey(k, bottomPort(k)), [mean(c.ports.bottom.map((q) => portOffset(c, "bottom", q))), 0]);
  }
  return out;
}

function place(box, x, y) {
  box.x = x;
  box.y = y;
  if (!box.children) return;
  for (const c of box.children) {
    const p = box.inner.pos.get(c.key);
    place(c, x + box.dx + p.x, y + box.oy + p.y);
  }
}

/** The polyline of one edge, in absolute coordinates (see the file comment). */
function route(byKey, a, holders) {
  const [upper, lower] = a.up ? [a.cv, a.cu] : [a.cu, a.cv];
  if (a.flat) {
    // sideways between two boxes of one row (a residual), from the facing sides: the two
    // children of the innermost facing pair that hold the ends, or of an outer pair (at last of
    // the common box) where the line would pass within CLEARANCE of another box
    const sideways = (k) => {
      const p = byKey.get(k < 0 ? a.cu[0] : a.cu[k + 1]), q = byKey.get(k < 0 ? a.cv[0] : a.cv[k + 1]);
      const ltr = p.x <= q.x;
      return [[ltr ? p.x + p.w : p.x, p.y + p.h / 2], [ltr ? q.x : q.x + q.w, q.y + q.h / 2]];
    };
    const clear = ([p, q]) => {
      const line = curve(p, q);
      for (const b of byKey.values()) {
        if (holders.has(b.key)) continue;
        for (let i = 1; i < line.length; i++) if (segmentHits(line[i - 1], line[i], b, CLEARANCE)) return false;
      }
      return true;
    };
    for (let k = a.cross ? a.depth : -1; k >= -1; k--) { const pts = sideways(k); if (clear(pts)) return pts; }
    // else around: out of the side, along the gap below the row (clear of the common box's
    // children), in at the other side
    const common = byKey.get(a.box), band = common.inner.bands[common.inner.layerOf.get(a.cu[0])];
    const gy = common.y + common.oy + band.bottom + GAP.layer / 2;
    const [[x0, y0], [x1, y1]] = sideways(-1);
    const out = x0 <= x1 ? GAP.node / 3 : -GAP.node / 3;
    return [[x0, y0], [x0 + out, gy], [x1 - out, gy], [x1, y1]];
  }
  const pts = [];
  const push = (x, y) => {
    const last = pts[pts.length - 1];
    if (!last || Math.abs(last[0] - x) > 1e-6 || Math.abs(last[1] - y) > 1e-6) pts.push([x, y]);
  };
  const band = (box, L) => box.inner.bands[L];
  const ax = (box, x) => box.x + box.dx + x;
  const ay = (box, y) => box.y + box.oy + y;
  // From the end in the box `box` (child key `from`) along the chain of edge `ek`.
  const walk = (box, from, ek) => {
    const bottom = ay(box, band(box, box.inner.layerOf.get(from)).bottom);
    if (pts[pts.length - 1][1] < bottom) push(pts[pts.length - 1][0], bottom);
    for (const d of box.inner.chains.get(ek)) {
      push(ax(box, d.x), ay(box, band(box, d.layer).top));
      push(ax(box, d.x), ay(box, band(box, d.layer).bottom));
    }
  };
  // Up and out: from the upper leaf through the bottom ports of its groups.
  const leafU = byKey.get(upper[upper.length - 1]);
  push(leafU.x + leafU.w / 2, leafU.y + leafU.h);
  for (let k = upper.length - 2; k >= 0; k--) {
    const box = byKey.get(upper[k]), child = upper[k + 1];
    walk(box, child, edgeKey(child, bottomPort(child)));
    const px = ax(box, box.inner.portX.bottom.get(child));
    push(px, ay(box, band(box, box.inner.bottomLayer).top));
    push(px, box.y + box.h);
  }
  // Across the common box.
  const common = byKey.get(a.box);
  walk(common, upper[0], edgeKey(upper[0], lower[0]));
  // In: through the top ports of the lower end's groups to the lower leaf.
  for (let k = 0; k < lower.length; k++) {
    const box = byKey.get(lower[k]);
    if (k === lower.length - 1) { push(box.x + box.w / 2, box.y); break; }
    const child = lower[k + 1];
    const px = ax(box, box.inner.portX.top.get(child));
    push(px, box.y);
    push(px, ay(box, 0));
    const chain = box.inner.chains.get(edgeKey(topPort(child), child));
    for (const d of chain) {
      push(ax(box, d.x), ay(box, band(box, d.layer).top));
      push(ax(box, d.x), ay(box, band(box, d.layer).bottom));
    }
  }
  return pts;
}

/** The curve pathData draws from p to q (vertical tangents at both ends), in 8 straight pieces. */
function curve(p, q) {
  const my = (q[1] - p[1]) / 2, out = [p];
  for (let i = 1; i <= 8; i++) {
    const t = i / 8, u = 1 - t, a = 3 * u * t * t + t * t * t;
    out.push([p[0] + (q[0] - p[0]) * a, p[1] + 3 * u * u * t * my + 3 * u * t * t * my + t * t * t * (q[1] - p[1])]);
  }
  return out;
}

/** How near (px) a sideways line may pass a box it does not join: half the gap the layout keeps
 * beside a line that runs down (GAP.dummy), so it never seems to touch one, and more than
 * pathData's whole-pixel rounding moves it (about 1 px). A line that only stayed outside the exact box grazed a corner
 * by 0.05 px and was drawn 1 px into it (a train step's `blocks_3 (backward)`). */
const CLEARANCE = GAP.dummy / 2;

/** Does the segment pq come nearer than `margin` px to box b (run strictly inside b grown by
 * `margin`)? Liang-Barsky clipping. */
function segmentHits(p, q, b, margin) {
  const x0 = b.x - margin, y0 = b.y - margin, x1 = b.x + b.w + margin, y1 = b.y + b.h + margin;
  let t0 = 0, t1 = 1;
  const dx = q[0] - p[0], dy = q[1] - p[1];
  for (const [pp, qq] of [[-dx, p[0] - x0], [dx, x1 - p[0]], [-dy, p[1] - y0], [dy, y1 - p[1]]]) {
    if (pp === 0) { if (qq <= 0) return false; continue; }
    const t = qq / pp;
    if (pp < 0) t0 = Math.max(t0, t); else t1 = Math.min(t1, t);
    if (t0 > t1) return false;
  }
  return t1 - t0 > 1e-6;
}

/** SVG path data for a route: vertical runs straight, layer gaps as vertical-tangent curves.
 * Whole pixels and relative commands; a run that moves sideways by under 1.5 px stays straight
 * (a long edge through dummy nodes is mostly such runs), which keeps big pictures small. */
export function pathData(points) {
  const r = (v) => Math.round(v);
  let px = r(points[0][0]), py = r(points[0][1]);
  let d = `M${px},${py}`;
  for (let i = 1; i < points.length; i++) {
    const x1 = r(points[i][0]), y1 = r(points[i][1]);
    if (Math.abs(px - x1) < 1.5) { if (y1 !== py) d += `v${y1 - py}`; py = y1; continue; }
    const dx = x1 - px, dy = y1 - py, my = r(dy / 2);
    d += `c0,${my} ${dx},${my} ${dx},${dy}`;
    px = x1;
    py = y1;
  }
  return d;
}
