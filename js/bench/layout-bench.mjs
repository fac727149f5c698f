// Layout quality and cost on a corpus of reports, for four engines: the layout before issue 20
// ("legacy": js/bench/legacy-layout.js, edges drawn straight between box centres), the new own
// layout (js/scene.js), @dagrejs/dagre and elkjs (both compound layouts of the same boxes).
//
//   node js/bench/layout-bench.mjs build/layout-corpus/*.json > build/layout-bench.json
//
// For every graph of every report (traced, compiled, gradient) at the view's first expansion
// (initialExpansion(INITIAL_LIMIT, BUDGET), what the widget draws first), each engine lays out the same boxes
// (same sizes, same groups) and the same aggregated edges. Measured on the drawn geometry:
// crossings = pairs of edge segments that properly intersect (curves sampled in 8 pieces);
// through = edges that run through a box that is neither of their ends nor a group holding one;
// aspect = width / height; ms = median of 3 layout runs (node, this machine).

import { readFileSync } from "node:fs";
import dagre from "@dagrejs/dagre";
import ELK from "elkjs/lib/elk.bundled.js";
import { layered as legacyLayered } from "./legacy-layout.js";
import { prepareGraph, ancestors } from "../model.js";
import { BUDGET, buildScene, initialExpansion, INITIAL_LIMIT, pathData, CH, PAD, HEADER } from "../scene.js";
import { fmtNum, trunc } from "../util.js";

const elk = new ELK();

function sampleCubic(p0, p1, p2, p3, n = 8) {
  const out = [];
  for (let i = 0; i <= n; i++) {
    const t = i / n, u = 1 - t;
    out.push([u * u * u * p0[0] + 3 * u * u * t * p1[0] + 3 * u * t * t * p2[0] + t * t * t * p3[0],
      u * u * u * p0[1] + 3 * u * u * t * p1[1] + 3 * u * t * t * p2[1] + t * t * t * p3[1]]);
  }
  return out;
}

/** Our routes as drawn: pathData's commands (M, relative v and c), cubics in 8 pieces. */
function ownPolyline(points) {
  const out = [];
  let x = 0, y = 0;
  for (const [, cmd, args] of pathData(points).matchAll(/([Mvc])([^Mvc]*)/g)) {
    const n = (args.match(/-?\d+(?:\.\d+)?/g) || []).map(Number);
    if (cmd === "M") { [x, y] = n; out.push([x, y]); }
    else if (cmd === "v") { y += n[0]; out.push([x, y]); }
    else {
      out.push(...sampleCubic([x, y], [x + n[0], y + n[1]], [x + n[2], y + n[3]], [x + n[4], y + n[5]]).slice(1));
      x += n[4];
      y += n[5];
    }
  }
  return out;
}

// --- the four engines: each returns {boxes: [{key, x, y, w, h, cluster, anc: Set}], edges: [{u, v, poly}], w, h}
function commonTree(pg, expanded) {
  // the own scene gives the units, the aggregated edges and the leaf sizes every engine shares
  return buildScene(pg, expanded);
}

function ownEngine(pg, expanded) {
  const sc = buildScene(pg, expanded);
  return fromScene(sc, sc.edges.map((a) => ({ u: a.u, v: a.v, poly: ownPolyline(a.points) })));
}

function fromScene(sc, edges) {
  const boxes = [];
  for (const b of sc.boxes.values()) if (b.key !== "root") boxes.push({ key: b.key, x: b.x, y: b.y, w: b.w, h: b.h, cluster: !!b.children });
  const root = sc.boxes.get("root");
  return { boxes, edges, w: root.w, h: root.h };
}

function legacyEngine(pg, expanded) {
  const sc = buildScene(pg, expanded); // for units, sizes and edges; then the old geometry
  const perBox = new Map();
  for (const a of sc.edges) (perBox.get(a.box) || perBox.set(a.box, []).get(a.box)).push([a.cu[0], a.cv[0]]);
  const lay = (box) => {
    for (const c of box.children) if (c.children) lay(c);
    box.inner = legacyLayered(box.children.map((c) => ({ key: c.key, w: c.w, h: c.h })), perBox.get(box.key) || []);
    const root = box.key === "root";
    const title = root ? "" : `▾ ${trunc(box.group.label, 40)} · ${box.group.kind} · ${fmtNum(box.group.count)} ops`;
    box.w = Math.max(box.inner.width + (root ? 0 : 2 * PAD), root ? 0 : title.length * CH + 2 * PAD);
    box.h = box.inner.height + (root ? 0 : HEADER + PAD);
    box.dx = (box.w - box.inner.width) / 2;
  };
  const place = (box, x, y) => {
    box.x = x; box.y = y;
    if (!box.children) return;
    const oy = box.key === "root" ? 0 : HEADER;
    for (const c of box.children) { const p = box.inner.pos.get(c.key); place(c, x + box.dx + p.x, y + oy + p.y); }
  };
  lay(sc.root);
  place(sc.root, 0, 0);
  const edges = sc.edges.map((a) => {
    const p = sc.boxes.get(a.u), q = sc.boxes.get(a.v);
    const x1 = p.x + p.w / 2, y1 = p.y + p.h, x2 = q.x + q.w / 2, y2 = q.y;
    const dy = Math.max(20, Math.abs(y2 - y1) / 2);
    return { u: a.u, v: a.v, poly: sampleCubic([x1, y1], [x1, y1 + dy], [x2, y2 - dy], [x2, y2]) };
  });
  return fromScene(sc, edges);
}

function dagreEngine(pg, expanded) {
  const sc = commonTree(pg, expanded);
  const g = new dagre.graphlib.Graph({ compound: true, multigraph: false });
  g.setGraph({ rankdir: "TB", nodesep: 18, ranksep: 30, edgesep: 8 });
  g.setDefaultEdgeLabel(() => ({}));
  const add = (box, parent) => {
    for (const c of box.children) {
      if (c.children) { g.setNode(c.key, { paddingTop: HEADER }); add(c, c.key); }
      else g.setNode(c.key, { width: c.w, height: c.h });
      if (parent) g.setParent(c.key, parent);
    }
  };
  add(sc.root, null);
  for (const a of sc.edges) g.setEdge(a.u, a.v);
  dagre.layout(g);
  const boxes = [];
  let W = 0, H = 0;
  for (const key of g.nodes()) {
    const n = g.node(key);
    const b = { key, x: n.x - n.width / 2, y: n.y - n.height / 2, w: n.width, h: n.height, cluster: g.children(key).length > 0 };
    boxes.push(b);
    W = Math.max(W, b.x + b.w); H = Math.max(H, b.y + b.h);
  }
  const edges = sc.edges.map((a) => {
    const pts = g.edge(a.u, a.v).points.map((p) => [p.x, p.y]);
    return { u: a.u, v: a.v, poly: pts };
  });
  return { boxes, edges, w: W, h: H };
}

async function elkEngine(pg, expanded) {
  const sc = commonTree(pg, expanded);
  const toElk = (box) => box.children.map((c) => (c.children
    ? { id: c.key, layoutOptions: { "elk.padding": `[top=${HEADER},left=${PAD},bottom=${PAD},right=${PAD}]` }, children: toElk(c) }
    : { id: c.key, width: c.w, height: c.h }));
  const graph = { id: "root", layoutOptions: { "elk.algorithm": "layered", "elk.direction": "DOWN",
    "elk.hierarchyHandling": "INCLUDE_CHILDREN", "elk.json.shapeCoords": "ROOT", "elk.json.edgeCoords": "ROOT",
    "elk.spacing.nodeNode": "18", "elk.layered.spacing.nodeNodeBetweenLayers": "30" },
  children: toElk(sc.root), edges: sc.edges.map((a, i) => ({ id: "e" + i, sources: [a.u], targets: [a.v] })) };
  const out = await elk.layout(graph);
  const boxes = [];
  const walk = (n) => { for (const c of n.children || []) { boxes.push({ key: c.id, x: c.x, y: c.y, w: c.width, h: c.height, cluster: !!(c.children && c.children.length) }); walk(c); } };
  walk(out);
  const edges = out.edges.map((e, i) => {
    const poly = [];
    for (const s of e.sections || []) { poly.push([s.startPoint.x, s.startPoint.y]); for (const b of s.bendPoints || []) poly.push([b.x, b.y]); poly.push([s.endPoint.x, s.endPoint.y]); }
    return { u: sc.edges[i].u, v: sc.edges[i].v, poly };
  });
  return { boxes, edges, w: out.width, h: out.height };
}

// --- metrics
function orient(a, b, c) { const v = (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0]); return Math.abs(v) < 1e-6 ? 0 : Math.sign(v); }
function properCross(p1, p2, q1, q2) {
  const a = orient(p1, p2, q1), b = orient(p1, p2, q2), c = orient(q1, q2, p1), d = orient(q1, q2, p2);
  return a * b < 0 && c * d < 0;
}

function segHitsRect(p, q, r) {
  // Liang-Barsky clip of segment pq against rect r (shrunk by 1 px): any part strictly inside?
  const x0 = r.x + 1, y0 = r.y + 1, x1 = r.x + r.w - 1, y1 = r.y + r.h - 1;
  if (x1 <= x0 || y1 <= y0) return false;
  let t0 = 0, t1 = 1;
  const dx = q[0] - p[0], dy = q[1] - p[1];
  for (const [pp, qq] of [[-dx, p[0] - x0], [dx, x1 - p[0]], [-dy, p[1] - y0], [dy, y1 - p[1]]]) {
    if (pp === 0) { if (qq <= 0) return false; continue; }
    const t = qq / pp;
    if (pp < 0) { if (t > t1) return false; if (t > t0) t0 = t; } else { if (t < t0) return false; if (t < t1) t1 = t; }
  }
  return t1 - t0 > 1e-6;
}

export function metrics(lay, pg) {
  const segs = [];
  lay.edges.forEach((e, k) => { for (let i = 1; i < e.poly.length; i++) segs.push([k, e.poly[i - 1], e.poly[i]]); });
  // crossings: bucket by y
  const B = 40, buckets = new Map();
  segs.forEach((s, i) => {
    const lo = Math.floor(Math.min(s[1][1], s[2][1]) / B), hi = Math.floor(Math.max(s[1][1], s[2][1]) / B);
    for (let b = lo; b <= hi; b++) (buckets.get(b) || buckets.set(b, []).get(b)).push(i);
  });
  const counted = new Set();
  let crossings = 0;
  for (const list of buckets.values()) {
    for (let x = 0; x < list.length; x++) for (let y = x + 1; y < list.length; y++) {
      const i = list[x], j = list[y];
      const a = segs[i], b = segs[j];
      if (a[0] === b[0]) continue;
      const key = i < j ? i * segs.length + j : j * segs.length + i;
      if (counted.has(key)) continue;
      if (properCross(a[1], a[2], b[1], b[2])) { counted.add(key); crossings++; }
    }
  }
  // through boxes
  const boxByKey = new Map(lay.boxes.map((b) => [b.key, b]));
  const ancOf = (key) => new Set(ancestors(pg, key).map((g) => "g:" + g));
  let through = 0;
  const throughEdges = [];
  for (const e of lay.edges) {
    const ok = new Set([e.u, e.v, ...ancOf(e.u), ...ancOf(e.v)]);
    let hit = null;
    for (const b of lay.boxes) {
      if (ok.has(b.key)) continue;
      for (let i = 1; i < e.poly.length && !hit; i++) if (segHitsRect(e.poly[i - 1], e.poly[i], b)) hit = b.key;
      if (hit) break;
    }
    if (hit) { through++; throughEdges.push([e.u, e.v, hit]); }
  }
  // overlapping boxes (siblings)
  return { crossings, through, throughEdges: throughEdges.slice(0, 3), aspect: lay.w / Math.max(1, lay.h), w: lay.w, h: lay.h,
    boxes: lay.boxes.filter((b) => !b.cluster).length, edges: lay.edges.length, missing: boxByKey.size < lay.boxes.length };
}

async function timed(fn, reps = 3) {
  const t = [];
  let out;
  for (let r = 0; r < reps; r++) { const t0 = performance.now(); out = await fn(); t.push(performance.now() - t0); }
  t.sort((a, b) => a - b);
  return [out, t[Math.floor(t.length / 2)]];
}

const ENGINES = { legacy: legacyEngine, own: ownEngine, dagre: dagreEngine, elk: elkEngine };

const files = process.argv.slice(2).filter((f) => !f.startsWith("--"));
const only = (process.argv.find((a) => a.startsWith("--engines=")) || "").slice(10).split(",").filter(Boolean);
const rows = [];
for (const file of files) {
  const report = JSON.parse(readFileSync(file, "utf8"));
  for (const which of ["traced", "compiled", "gradient"]) {
    const graph = report.graphs?.[which];
    if (!graph || !(graph.nodes || []).length) continue;
    const pg = prepareGraph(graph, report);
    const expanded = initialExpansion(pg, INITIAL_LIMIT, BUDGET);
    const row = { file: file.split("/").pop(), graph: which, nodes: graph.nodes.length };
    for (const [name, engine] of Object.entries(ENGINES)) {
      if (only.length && !only.includes(name)) continue;
      try {
        const [lay, ms] = await timed(() => engine(pg, new Set(expanded)));
        row[name] = { ...metrics(lay, pg), ms: Math.round(ms * 10) / 10 };
      } catch (err) {
        row[name] = { error: String(err?.message || err).slice(0, 200) };
      }
    }
    rows.push(row);
    process.stderr.write(`${row.file} ${which}: ` + Object.keys(ENGINES).filter((e) => row[e]).map((e) => `${e} ${row[e].error ? "ERR " + row[e].error : `x${row[e].crossings} t${row[e].through} ${row[e].ms}ms`}`).join(" | ") + "\n");
  }
}
const total = {};
for (const name of Object.keys(ENGINES)) {
  const ok = rows.filter((r) => r[name] && !r[name].error);
  if (!ok.length) continue;
  total[name] = { graphs: ok.length, crossings: ok.reduce((s, r) => s + r[name].crossings, 0), through: ok.reduce((s, r) => s + r[name].through, 0),
    ms: Math.round(ok.reduce((s, r) => s + r[name].ms, 0)), errors: rows.filter((r) => r[name]?.error).length };
}
console.log(JSON.stringify({ total, rows }, null, 1));
