// A layered (Sugiyama) layout of the children of one box, top to bottom, with bounded work.
//
// rank(): cycle breaking by DFS in program order, longest-path layers (sources pulled down next
// to their first consumer), empty layers removed. layoutBox(): virtual "port" nodes above and
// below the children for edges that enter or leave the box (their channels run between the
// children, never through them), dummy nodes on every edge longer than one layer, a fixed number
// of barycentre sweeps with adjacent-swap refinement keeping the order with the fewest crossings
// (counted exactly, O(E log V) per layer pair), and x coordinates from a fixed number of
// relaxation passes, each an exact weighted isotonic regression per layer (dummy chains weigh
// most, so long edges run straight). Every pass is O(V + E) (sorts aside), so the cost is
// predictable; the caller bounds V (the node budget). Graphviz's network simplex is what
// FACTS.md measured as too slow on HLO graphs, so there is none here.
//
// nbcompile/report/layout.py is a line-by-line port (the static picture draws the same layout);
// tests/widgets/test_layout_parity.py checks the two agree on real reports.

export const GAP = { node: 18, dummy: 8, layer: 30, port: 16, dummyW: 6, column: 96 };
const SWEEPS = 8;
const RELAX = 8;
const TRANSPOSE_MAX = 4; // adjacent-swap passes per sweep
// Bounded work: boxes with many dummy nodes get fewer passes (at least 2 of each).
const WORK = 12000;
const passes = (most, n) => Math.max(2, Math.min(most, Math.floor(WORK / Math.max(1, n))));
const SEP = "\u0001";

/** Port node keys: a channel from the box's top border to child k / from k to the bottom border. */
export const topPort = (k) => "\u0002t" + k;
export const bottomPort = (k) => "\u0002b" + k;
export const edgeKey = (a, b) => a + SEP + b;

/**
 * Layers of one box's children. keys: child keys in program order; edges: [[a, b], ...].
 * Returns {layer: Map(key -> int), dag: [[upper, lower], ...] (deduplicated), reversed: Set of
 * edgeKey(a, b) for input edges drawn upwards (they close a cycle)}.
 */
export function rank(keys, edges) {
  const n = keys.length;
  const idx = new Map(keys.map((k, i) => [k, i]));
  const out = Array.from({ length: n }, () => []);
  const seen = new Set();
  for (const [a, b] of edges) {
    const i = idx.get(a), j = idx.get(b);
    if (i === undefined || j === undefined || i === j) continue;
    const k = i * n + j;
    if (seen.has(k)) continue;
    seen.add(k);
    out[i].push(j);
  }
  // DFS in program order: an edge to a node on the stack closes a cycle and is drawn reversed.
  const state = new Uint8Array(n);
  const dagSeen = new Set();
  const dag = [];
  const reversed = new Set();
  const addDag = (i, j) => {
    const k = i * n + j;
    if (!dagSeen.has(k)) { dagSeen.add(k); dag.push([i, j]); }
  };
  for (let s = 0; s < n; s++) {
    if (state[s]) continue;
    const stack = [[s, 0]];
    state[s] = 1;
    while (stack.length) {
      const top = stack[stack.length - 1];
      const v = top[0], k = top[1];
      if (k < out[v].length) {
        top[1] = k + 1;
        const u = out[v][k];
        if (state[u] === 1) { addDag(u, v); reversed.add(edgeKey(keys[v], keys[u])); }
        else {
          addDag(v, u);
          if (state[u] === 0) { state[u] = 1; stack.push([u, 0]); }
        }
      } else {
        state[v] = 2;
        stack.pop();
      }
    }
  }
  const succ = Array.from({ length: n }, () => []);
  const indeg = new Int32Array(n);
  for (const [i, j] of dag) { succ[i].push(j); indeg[j]++; }
  const layer = new Int32Array(n);
  const topo = [];
  for (let i = 0; i < n; i++) if (indeg[i] === 0) topo.push(i);
  for (let q = 0; q < topo.length; q++) {
    const i = topo[q];
    for (const j of succ[i]) {
      layer[j] = Math.max(layer[j], layer[i] + 1);
      if (--indeg[j] === 0) topo.push(j);
    }
  }
  // Pull nodes with successors down to just above their nearest successor.
  for (let t = topo.length - 1; t >= 0; t--) {
    const i = topo[t];
    if (!succ[i].length) continue;
    let m = Infinity;
    for (const j of succ[i]) m = Math.min(m, layer[j]);
    layer[i] = Math.max(layer[i], m - 1);
  }
  const used = [...new Set(layer)].sort((a, b) => a - b);
  const dense = new Map(used.map((l, i) => [l, i]));
  return {
    layer: new Map(keys.map((k, i) => [k, dense.get(layer[i])])),
    dag: dag.map(([i, j]) => [keys[i], keys[j]]),
    reversed,
  };
}

/**
 * Layers of a box drawn as two facing columns (the gradient: forward pass down column 0, the
 * backward pass up column 1). columns: Map(key -> 0 | 1); partner: Map(column-1 key -> the
 * column-0 key it mirrors). Column 0 is ranked alone (rank()); a mirrored child takes its
 * partner's layer; another column-1 child the deepest layer of the column-0 children it touches
 * (in `given` with `across`: Map(key -> the forward group's children it touches)), else one row
 * above the column-1 children it reads (the backward pass runs up), else a layer below all. Edges within one layer are `flat`
 * (drawn sideways), edges upwards `reversed`. Returns rank()'s fields plus {columns, flat:
 * [[a, b], ...]}.
 */
export function mirrorRank(keys, edges, columns, partner, given = null, across = null) {
  const left = keys.filter((k) => columns.get(k) === 0);
  const inLeft = new Set(left);
  const layer = new Map(rank(left, edges.filter(([a, b]) => inLeft.has(a) && inLeft.has(b))).layer);
  const from = given || layer; // `given`: the partners' layers in another box (followRank)
  let below = 0;
  for (const L of from.values()) below = Math.max(below, L + 1);
  const right = keys.filter((k) => columns.get(k) === 1);
  for (const k of right) if (from.has(partner.get(k))) layer.set(k, from.get(partner.get(k)));
  const near = new Map();
  for (const [a, b] of edges) { (near.get(a) || near.set(a, []).get(a)).push(b); (near.get(b) || near.set(b, []).get(b)).push(a); }
  // facing the forward values it reads (a residual, an input)
  for (const k of right) {
    if (layer.has(k)) continue;
    let L = -1;
    for (const j of near.get(k) || []) if (columns.get(j) === 0 && from.has(j)) L = Math.max(L, from.get(j));
    for (const j of across?.get(k) || []) if (from.has(j)) L = Math.max(L, from.get(j));
    if (L >= 0) layer.set(k, L);
  }
  // the rest of the backward column runs up (program order is an order of the data flow): one
  // row below the lowest of its consumers (latest first), else one row above the highest of
  // its producers (never above the top row), else below all
  const preds = new Map(), succs = new Map();
  for (const [a, b] of edges) {
    if (columns.get(a) !== 1 || columns.get(b) !== 1 || a === b) continue;
    (preds.get(b) || preds.set(b, []).get(b)).push(a);
    (succs.get(a) || succs.set(a, []).get(a)).push(b);
  }
  for (const k of [...right].reverse()) {
    if (layer.has(k)) continue;
    const down = (succs.get(k) || []).filter((j) => layer.has(j)).map((j) => layer.get(j) + 1);
    if (down.length) layer.set(k, Math.max(...down));
  }
  for (const k of right) {
    if (layer.has(k)) continue;
    const up = (preds.get(k) || []).filter((j) => layer.has(j)).map((j) => layer.get(j));
    layer.set(k, up.length ? Math.max(0, Math.min(...up) - 1) : below);
  }
  if (!given) {
    const used = [...new Set(layer.values())].sort((a, b) => a - b);
    const dense = new Map(used.map((l, i) => [l, i]));
    for (const [k, L] of layer) layer.set(k, dense.get(L));
  }
  const dag = [], flat = [], reversed = new Set(), seen = new Set();
  for (const [a, b] of edges) {
    if (!layer.has(a) || !layer.has(b) || a === b) continue;
    const la = layer.get(a), lb = layer.get(b);
    const [u, v] = la <= lb ? [a, b] : [b, a];
    if (la > lb) reversed.add(edgeKey(a, b));
    if (seen.has(edgeKey(u, v))) continue;
    seen.add(edgeKey(u, v));
    (la === lb ? flat : dag).push([u, v]);
  }
  return { layer, dag, reversed, flat, columns };
}

/** Layers of a backward group's children drawn level with its forward group's (both open, side
 * by side): each child in its partner's layer of `given` (the forward group's rank), one
 * straight column. partner: Map(child key -> the forward group's child key). */
export function followRank(keys, edges, partner, given, across = null) {
  return mirrorRank(keys, edges, new Map(keys.map((k) => [k, 1])), partner, given, across);
}

/**
 * Coordinates of one box's children. items: [{key, w, h}] in program order; ranked: rank()'s
 * result for these keys; ports: {top: [child key], bottom: [child key]}.
 * Returns {pos: Map(key -> {x, y}) (top-left corners), width, height, bands: [{top, bottom}]
 * per layer, layerOf: Map(key -> layer), chains: Map(edgeKey -> [{x, layer}]) (dummy centres of
 * each dag and port edge, top to bottom), portX: {top: Map, bottom: Map} (centre x of each
 * port), bottomLayer}. Port edges are edgeKey(topPort(k), k) and edgeKey(k, bottomPort(k)).
 * attach: Map(edgeKey -> [offset on the upper end, offset on the lower end]): where an edge
 * meets a child that is an expanded group (its port), in px from the child's centre; ordering
 * and placement use it, so edges leaving a group in port order reach their ends uncrossed.
 */
export function layoutBox(items, ranked, ports = { top: [], bottom: [] }, attach = new Map(), g = GAP) {
  const nodes = [];
  const idx = new Map();
  // a backward group and its forward group side by side share their rows (scene.js): the same
  // top port layer and band heights at least each other's
  const shift = ports.top.length || ranked.forceTop ? 1 : 0;
  const columns = ranked.columns || null; // two facing columns (mirrorRank)
  let maxL = -1;
  for (const it of items) {
    const L = ranked.layer.get(it.key) + shift;
    idx.set(it.key, nodes.length);
    nodes.push({ key: it.key, w: it.w, h: it.h, layer: L, real: true, col: columns ? columns.get(it.key) || 0 : 0 });
    maxL = Math.max(maxL, L);
  }
  const bottomL = maxL + 1;
  const portNode = (key, L, k) => { idx.set(key, nodes.length); nodes.push({ key, w: g.dummyW, h: 0, layer: L, real: false, col: nodes[idx.get(k)].col }); };
  for (const k of ports.top) portNode(topPort(k), 0, k);
  for (const k of ports.bottom) portNode(bottomPort(k), bottomL, k);
  const nLayers = ports.bottom.length ? bottomL + 1 : bottomL;
  const edges = [];
  for (const [a, b] of ranked.dag) edges.push([a, b]);
  for (const k of ports.top) edges.push([topPort(k), k]);
  for (const k of ports.bottom) edges.push([k, bottomPort(k)]);
  // Dummy nodes: each edge becomes a chain of one-layer segments.
  const up = [], down = [];
  // Neighbour lists hold [node, weight, px offset of the attachment on that node, fraction of
  // a position for ordering (the offset over the node's width), the same fraction on this node].
  const link = (i, j, offI = 0, offJ = 0) => {
    const w = !nodes[i].real && !nodes[j].real ? 8 : !nodes[i].real || !nodes[j].real ? 2 : 1;
    const fi = frac(offI, nodes[i].w), fj = frac(offJ, nodes[j].w);
    (down[i] ||= []).push([j, w, offJ, fj, fi]);
    (up[j] ||= []).push([i, w, offI, fi, fj]);
  };
  const chainIdx = new Map();
  for (const [a, b] of edges) {
    let prev = idx.get(a);
    const last = idx.get(b);
    const [offA, offB] = attach.get(edgeKey(a, b)) || [0, 0];
    const dummies = [];
    for (let L = nodes[prev].layer + 1; L < nodes[last].layer; L++) {
      const d = nodes.length;
      nodes.push({ key: null, w: g.dummyW, h: 0, layer: L, real: false, col: nodes[last].col });
      link(prev, d, prev === idx.get(a) ? offA : 0, 0);
      dummies.push(d);
      prev = d;
    }
    link(prev, last, prev === idx.get(a) ? offA : 0, offB);
    chainIdx.set(edgeKey(a, b), dummies);
  }
  for (const [a, b] of ranked.flat || []) chainIdx.set(edgeKey(a, b), []); // sideways, no layer crossed
  const N = nodes.length;
  for (let i = 0; i < N; i++) { up[i] ||= []; down[i] ||= []; }
  const layers = Array.from({ length: nLayers }, () => []);
  for (let i = 0; i < N; i++) layers[nodes[i].layer].push(i);
  const pos = new Float64Array(N); // index within the layer
  // two columns: every layer keeps column 0 left of column 1 (a stable partition)
  const part = (L) => { if (columns) layers[L] = [...layers[L].filter((i) => !nodes[i].col), ...layers[L].filter((i) => nodes[i].col)]; };
  const renumber = (L) => { part(L); layers[L].forEach((i, k) => { pos[i] = k; }); };
  layers.forEach((_, L) => renumber(L));

  const crossings = () => {
    let c = 0;
    for (let L = 0; L + 1 < nLayers; L++) c += crossBetween(layers[L], down, pos, layers[L + 1].length);
    return c;
  };
  let best = layers.map((L) => L.slice());
  let bestC = crossings();
  const sweeps = passes(SWEEPS, N), tpasses = passes(TRANSPOSE_MAX, N), relax = passes(RELAX, N);
  for (let sweep = 0; sweep < sweeps && bestC > 0; sweep++) {
    const downward = sweep % 2 === 0;
    const order = [];
    for (let L = 0; L < nLayers; L++) order.push(L);
    if (!downward) order.reverse();
    for (const L of order) {
      const nb = downward ? up : down;
      const bary = new Map();
      for (const i of layers[L]) {
        const list = nb[i];
        if (!list.length) { bary.set(i, pos[i]); continue; }
        let sum = 0;
        for (const [j, , , f] of list) sum += pos[j] + f;
        bary.set(i, sum / list.length);
      }
      layers[L].sort((a, b) => bary.get(a) - bary.get(b) || pos[a] - pos[b]);
      renumber(L);
    }
    transpose(layers, up, down, pos, renumber, tpasses, columns && nodes.map((nd) => nd.col));
    const c = crossings();
    if (c < bestC) { bestC = c; best = layers.map((L) => L.slice()); }
  }
  for (let L = 0; L < nLayers; L++) { layers[L] = best[L]; renumber(L); }

  // x: relaxation towards the weighted mean of neighbours, keeping order and separation.
  const x = new Float64Array(N);
  const sep = (i, j) => (nodes[i].w + nodes[j].w) / 2 + (nodes[i].real && nodes[j].real ? g.node : g.dummy);
  for (const L of layers) {
    let cx = 0;
    L.forEach((i, k) => { if (k) cx += sep(L[k - 1], i); x[i] = cx; });
  }
  for (let pass = 0; pass < (columns ? 0 : relax); pass++) {
    const order = [];
    for (let L = 0; L < nLayers; L++) order.push(L);
    if (pass % 2) order.reverse();
    for (const L of order) relaxLayer(layers[L], x, up, down, sep);
  }
  // Straighten long edges: move a whole dummy chain to one x where every layer has room.
  const slot = new Int32Array(N);
  layers.forEach((L) => L.forEach((i, k) => { slot[i] = k; }));
  const fits = (d, tx) => {
    const L = layers[nodes[d].layer], k = slot[d];
    if (k > 0 && tx - x[L[k - 1]] < sep(L[k - 1], d) - 1e-9) return false;
    if (k + 1 < L.length && x[L[k + 1]] - tx < sep(d, L[k + 1]) - 1e-9) return false;
    return true;
  };
  for (const dummies of chainIdx.values()) {
    if (dummies.length < 2 || columns) continue;
    const xs = dummies.map((d) => x[d]).sort((a, b) => a - b);
    for (const tx of [xs[xs.length >> 1], x[dummies[0]], x[dummies[dummies.length - 1]]]) {
      if (dummies.every((d) => fits(d, tx))) { for (const d of dummies) x[d] = tx; break; }
    }
  }
  if (columns) columnX(layers, nodes, x, sep, g.column);
  let minX = Infinity, maxX = -Infinity;
  for (let i = 0; i < N; i++) { minX = Math.min(minX, x[i] - nodes[i].w / 2); maxX = Math.max(maxX, x[i] + nodes[i].w / 2); }
  if (!N) { minX = 0; maxX = 0; }
  // y: bands of the layers' tallest real boxes; port layers have no height.
  const bands = [];
  let y = 0;
  for (let L = 0; L < nLayers; L++) {
    let h = ranked.minBands?.[L] || 0;
    for (const i of layers[L]) if (nodes[i].real) h = Math.max(h, nodes[i].h);
    if (L > 0) y += (L === 1 && shift) || (L === bottomL && ports.bottom.length) ? g.port : g.layer;
    bands.push({ top: y, bottom: y + h });
    y += h;
  }
  const out = { pos: new Map(), width: maxX - minX, height: y, bands, layerOf: new Map(), chains: new Map(),
    portX: { top: new Map(), bottom: new Map() }, bottomLayer: bottomL };
  for (let i = 0; i < N; i++) {
    const nd = nodes[i];
    if (nd.real) {
      out.pos.set(nd.key, { x: x[i] - nd.w / 2 - minX, y: bands[nd.layer].top });
      out.layerOf.set(nd.key, nd.layer);
    }
  }
  for (const k of ports.top) out.portX.top.set(k, x[idx.get(topPort(k))] - minX);
  for (const k of ports.bottom) out.portX.bottom.set(k, x[idx.get(bottomPort(k))] - minX);
  for (const [key, dummies] of chainIdx) out.chains.set(key, dummies.map((d) => ({ x: x[d] - minX, layer: nodes[d].layer })));
  return out;
}

/** Two straight columns: each layer's column-0 boxes side by side, centred on one axis, its
 * column-1 boxes centred on a second axis a gap right of the widest column-0 row. */
function columnX(layers, nodes, x, sep, gap) {
  const width = [0, 0];
  const rows = layers.map((L) => [0, 1].map((c) => {
    const row = L.filter((i) => nodes[i].col === c);
    let cx = 0;
    row.forEach((i, k) => { if (k) cx += sep(row[k - 1], i); x[i] = cx; });
    const w = row.length ? cx + (nodes[row[0]].w + nodes[row[row.length - 1]].w) / 2 : 0;
    width[c] = Math.max(width[c], w);
    return [row, w];
  }));
  for (const pair of rows) {
    pair.forEach(([row, w], c) => {
      const left = (c ? width[0] + gap : 0) + (width[c] - w) / 2 + (row.length ? nodes[row[0]].w / 2 : 0);
      for (const i of row) x[i] += left;
    });
  }
}

const frac = (off, w) => Math.max(-0.45, Math.min(0.45, off / Math.max(w, 1)));

/** Crossings between a layer and the next: inversions of the lower ends, with a Fenwick tree. */
function crossBetween(upper, down, pos, size) {
  const ends = [];
  for (const i of upper) {
    // this node's edges in port order, then by their lower end
    const lows = down[i].map(([j, , , f, own]) => [own, pos[j] + f]).sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    for (const [, p] of lows) ends.push(p);
  }
  if (ends.length < 2) return 0;
  // ranks of the lower ends (ports make them fractional)
  const rankOf = new Map([...new Set(ends)].sort((a, b) => a - b).map((p, r) => [p, r]));
  size = rankOf.size;
  const tree = new Int32Array(size + 1);
  let c = 0, seen = 0;
  for (const q of ends) {
    const p = rankOf.get(q);
    // count earlier ends strictly to the right of p
    let le = 0;
    for (let k = p + 1; k > 0; k -= k & -k) le += tree[k];
    c += seen - le;
    for (let k = p + 1; k <= size; k += k & -k) tree[k]++;
    seen++;
  }
  return c;
}

/** Crossings of the edges of u and v (u left of v) minus those after swapping them. */
function gain(nu, nv, pos) {
  if (!nu.length || !nv.length) return 0;
  let d = 0;
  for (const [a, , , fa] of nu) {
    const pa = pos[a] + fa;
    for (const [b, , , fb] of nv) { const pb = pos[b] + fb; if (pa > pb) d++; else if (pa < pb) d--; }
  }
  return d;
}

/** Adjacent swaps that lower the crossings with both neighbour layers (bounded passes). */
function transpose(layers, up, down, pos, renumber, most, cols = null) {
  for (let pass = 0; pass < most; pass++) {
    let improved = false;
    for (let L = 0; L < layers.length; L++) {
      const layer = layers[L];
      for (let k = 0; k + 1 < layer.length; k++) {
        const u = layer[k], v = layer[k + 1];
        if (cols && cols[u] !== cols[v]) continue;
        if (gain(up[u], up[v], pos) + gain(down[u], down[v], pos) > 0) {
          layer[k] = v;
          layer[k + 1] = u;
          pos[u] = k + 1;
          pos[v] = k;
          improved = true;
        }
      }
    }
    if (!improved) break;
  }
  layers.forEach((_, L) => renumber(L));
}

/** Move a layer towards its neighbours: weighted least squares under order and separation,
 * solved exactly by pool-adjacent-violators on x minus the cumulative separation. */
function relaxLayer(L, x, up, down, sep) {
  const n = L.length;
  if (!n) return;
  const off = new Float64Array(n);
  for (let k = 1; k < n; k++) off[k] = off[k - 1] + sep(L[k - 1], L[k]);
  const vals = [], wts = [], cnts = [];
  for (let k = 0; k < n; k++) {
    const i = L[k];
    let s = 0, w = 0;
    for (const [j, wt, off] of up[i]) { s += wt * (x[j] + off); w += wt; }
    for (const [j, wt, off] of down[i]) { s += wt * (x[j] + off); w += wt; }
    let v, wt;
    if (w > 0) { v = s / w - off[k]; wt = w; } else { v = x[i] - off[k]; wt = 0.01; }
    vals.push(v); wts.push(wt); cnts.push(1);
    while (vals.length > 1 && vals[vals.length - 2] > vals[vals.length - 1]) {
      const v2 = vals.pop(), w2 = wts.pop(), c2 = cnts.pop();
      const v1 = vals.pop(), w1 = wts.pop(), c1 = cnts.pop();
      vals.push((v1 * w1 + v2 * w2) / (w1 + w2)); wts.push(w1 + w2); cnts.push(c1 + c2);
    }
  }
  let k = 0;
  for (let b = 0; b < vals.length; b++) for (let c = 0; c < cnts[b]; c++, k++) x[L[k]] = vals[b] + off[k];
}
