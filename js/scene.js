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

import { bottomPort, edgeKey, layoutBox, rank, topPort } from "./layout.js";
import { ancestors, topOps } from "./model.js";
import { fmtNum, trunc } from "./util.js";

export const CH = 6.7; // px per character of the 11px monospace label font
export const LINE = 14;
export const PAD = 10;
export const HEADER = 22;
export const MAXW = 250;

/** Chunks (program-order slices of a flat program) open at first only while the picture stays
 * this small: their contents are there on demand, the first view stays readable. */
export const CHUNK_LIMIT = 40;

/** The first picture: whole levels of groups open while at most this many boxes are drawn
 * (one group alone may open up to the budget). nbcompile/report/svg.py draws the same. */
export const INITIAL_LIMIT = 60;
export const BUDGET = 400;

/** Group ids to expand first: breadth-first, whole depth levels while they fit `limit` boxes. */
export function initialExpansion(pg, limit, budget, chunkLimit = CHUNK_LIMIT) {
  const expanded = new Set();
  let level = [pg.root];
  let count = pg.root.items.length;
  while (level.length) {
    const groups = level.flatMap((g) => g.items.filter((it) => it.type === "group").map((it) => pg.groups.get(it.id)));
    const extra = groups.reduce((k, g) => k + g.items.length - 1, 0);
    const cap = groups.every((g) => g.kind === "chunk") ? Math.min(limit, chunkLimit) : limit;
    if (!groups.length || (count + extra > cap && !(groups.length === 1 && count + extra <= budget))) break;
    groups.forEach((g) => expanded.add(g.id));
    count += extra;
    level = groups;
  }
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
    const where = n.line != null ? ` · L${n.line}` : n.loc ? ` · ${n.loc}` : "";
    if (fusion || n.kind === "fusion") {
      lines = [`${n.label || n.op}${fusion ? " · " + fusion.kind : ""}`, (fusion?.ops || []).join("+") || n.shape || "", (n.shape || "") + where];
    } else {
      lines = [n.label && n.label !== n.op ? `${n.op} ${n.label}` : n.op, (n.shape || "") + where];
    }
    if (ins.length) lines.push("← " + ins.slice(0, 3).join(", ") + (ins.length > 3 ? ` +${ins.length - 3}` : ""));
  } else {
    const g = c.group;
    const lr = g.lineMin <= g.lineMax ? ` · L${g.lineMin}${g.lineMax > g.lineMin ? "–" + g.lineMax : ""}` : "";
    lines = [`▸ ${g.label}`, `${g.kind} · ${fmtNum(g.count)} ops${lr}`, topOps(g, 3).join(", ")];
  }
  const maxChars = Math.floor((MAXW - 14) / CH);
  lines = lines.map((t) => trunc(t, maxChars));
  const w = Math.min(MAXW, Math.max(70, Math.max(...lines.map((t) => t.length)) * CH + 14));
  return { lines, w, h: lines.length * LINE + 8 };
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
  const byKey = new Map();
  const index = (box) => { byKey.set(box.key, box); (box.children || []).forEach(index); };
  index(tree);
  for (const box of byKey.values()) {
    if (!box.children) continue;
    box.ranked = rank(box.children.map((c) => c.key), boxEdges.get(box.key) || []);
    box.ports = { top: [], bottom: [] };
  }
  // Ports: the upper end leaves its groups at the bottom, the lower end enters at the top.
  const addPorts = (chain, side) => {
    for (let k = 0; k + 1 < chain.length; k++) {
      const p = byKey.get(chain[k]).ports[side];
      if (!p.includes(chain[k + 1])) p.push(chain[k + 1]);
    }
  };
  for (const a of agg) {
    a.up = byKey.get(a.box).ranked.reversed.has(edgeKey(a.cu[0], a.cv[0]));
    const [upper, lower] = a.up ? [a.cv, a.cu] : [a.cu, a.cv];
    addPorts(upper, "bottom");
    addPorts(lower, "top");
  }
  const boxAgg = new Map();
  for (const a of agg) (boxAgg.get(a.box) || boxAgg.set(a.box, []).get(a.box)).push(a);
  layoutTree(pg, tree, byKey, boxAgg);
  place(tree, 0, 0);
  for (const a of agg) a.points = route(byKey, a);
  return { root: tree, boxes: byKey, edges: agg, unitOf };
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
  for (const c of box.children) {
    if (c.children) layoutTree(pg, c, byKey, boxAgg);
    else Object.assign(c, leafText(pg, c));
  }
  box.inner = layoutBox(box.children.map((c) => ({ key: c.key, w: c.w, h: c.h })), box.ranked, box.ports,
    attachments(box, byKey, boxAgg.get(box.key) || []));
  const root = box.key === "root";
  box.title = root ? "" : `▾ ${trunc(box.group.label, 40)} · ${box.group.kind} · ${fmtNum(box.group.count)} ops`;
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
function route(byKey, a) {
  const [upper, lower] = a.up ? [a.cv, a.cu] : [a.cu, a.cv];
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
