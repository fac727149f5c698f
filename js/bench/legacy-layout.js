// A bounded layered ("Sugiyama-lite") layout for boxes of different sizes, top to bottom.
//
// Cycle breaking by DFS, longest-path layering (sources pulled down next to their first
// consumer), a fixed number of barycentre sweeps for ordering and a fixed number of
// coordinate-relaxation passes. Every step is O(V + E) per pass, so the cost is predictable;
// the caller bounds V (the node budget). Graphviz's network simplex is what FACTS.md measured
// as too slow on HLO graphs, so there is none here.

const SWEEPS = 6;
const RELAX = 4;

/**
 * items: [{key, w, h}], edges: [[srcKey, dstKey], ...] (duplicates and self loops ignored).
 * Returns {pos: Map(key -> {x, y}), width, height}. Coordinates are top-left corners.
 */
export function layered(items, edges, { hgap = 18, vgap = 30 } = {}) {
  const n = items.length;
  const idx = new Map(items.map((it, i) => [it.key, i]));
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
  const dag = breakCycles(out);
  const layer = assignLayers(dag);
  const sparse = [];
  for (let i = 0; i < n; i++) (sparse[layer[i]] ||= []).push(i);
  const layers = sparse.filter(Boolean);
  const inn = Array.from({ length: n }, () => []);
  dag.forEach((succ, i) => succ.forEach((j) => inn[j].push(i)));
  const w = items.map((it) => it.w);
  const x = new Float64Array(n);
  const pack = () => {
    for (const L of layers) {
      let total = -hgap;
      for (const i of L) total += w[i] + hgap;
      let cx = -total / 2;
      for (const i of L) { x[i] = cx + w[i] / 2; cx += w[i] + hgap; }
    }
  };
  pack();
  for (let sweep = 0; sweep < SWEEPS; sweep++) {
    const down = sweep % 2 === 0;
    const order = down ? layers : [...layers].reverse();
    for (const L of order) {
      const bary = new Map();
      for (const i of L) {
        const nb = down ? inn[i] : dag[i];
        bary.set(i, nb.length ? nb.reduce((s, j) => s + x[j], 0) / nb.length : x[i]);
      }
      L.sort((a, b) => bary.get(a) - bary.get(b));
      let total = -hgap;
      for (const i of L) total += w[i] + hgap;
      let cx = -total / 2;
      for (const i of L) { x[i] = cx + w[i] / 2; cx += w[i] + hgap; }
    }
  }
  for (let pass = 0; pass < RELAX; pass++) {
    for (const L of pass % 2 === 0 ? layers : [...layers].reverse()) relaxLayer(L, x, w, inn, dag, hgap);
  }
  return finish(items, layers, x, w, vgap);
}

function breakCycles(out) {
  const n = out.length;
  const state = new Uint8Array(n); // 0 new, 1 on stack, 2 done
  const dag = out.map(() => []);
  for (let s = 0; s < n; s++) {
    if (state[s]) continue;
    const stack = [[s, 0]];
    state[s] = 1;
    while (stack.length) {
      const top = stack[stack.length - 1];
      const [v, k] = top;
      if (k < out[v].length) {
        top[1] = k + 1;
        const u = out[v][k];
        if (state[u] === 1) dag[u].push(v); // back edge: reverse it
        else {
          dag[v].push(u);
          if (state[u] === 0) { state[u] = 1; stack.push([u, 0]); }
        }
      } else {
        state[v] = 2;
        stack.pop();
      }
    }
  }
  return dag.map((a) => [...new Set(a)]);
}

function assignLayers(dag) {
  const n = dag.length;
  const indeg = new Int32Array(n);
  dag.forEach((succ) => succ.forEach((j) => indeg[j]++));
  const queue = [];
  for (let i = 0; i < n; i++) if (indeg[i] === 0) queue.push(i);
  const layer = new Int32Array(n);
  const topo = [];
  for (let q = 0; q < queue.length; q++) {
    const i = queue[q];
    topo.push(i);
    for (const j of dag[i]) {
      layer[j] = Math.max(layer[j], layer[i] + 1);
      if (--indeg[j] === 0) queue.push(j);
    }
  }
  // Pull nodes with successors down to just above their nearest successor.
  for (let t = topo.length - 1; t >= 0; t--) {
    const i = topo[t];
    if (!dag[i].length) continue;
    let m = Infinity;
    for (const j of dag[i]) m = Math.min(m, layer[j]);
    layer[i] = Math.max(layer[i], m - 1);
  }
  return layer;
}

function relaxLayer(L, x, w, inn, out, hgap) {
  const want = L.map((i) => {
    const nb = inn[i].concat(out[i]);
    return nb.length ? nb.reduce((s, j) => s + x[j], 0) / nb.length : x[i];
  });
  // Place at desired positions, then push apart left to right and right to left.
  const pos = want.slice();
  for (let k = 1; k < L.length; k++) {
    const min = pos[k - 1] + (w[L[k - 1]] + w[L[k]]) / 2 + hgap;
    if (pos[k] < min) pos[k] = min;
  }
  for (let k = L.length - 2; k >= 0; k--) {
    const max = pos[k + 1] - (w[L[k + 1]] + w[L[k]]) / 2 - hgap;
    if (pos[k] > max) pos[k] = max;
  }
  L.forEach((i, k) => { x[i] = pos[k]; });
}

function finish(items, layers, x, w, vgap) {
  const pos = new Map();
  if (!items.length) return { pos, width: 0, height: 0 };
  let minX = Infinity, maxX = -Infinity;
  const heights = layers.map((L) => {
    let lh = 0;
    for (const i of L) {
      lh = Math.max(lh, items[i].h);
      minX = Math.min(minX, x[i] - w[i] / 2);
      maxX = Math.max(maxX, x[i] + w[i] / 2);
    }
    return lh + vgap;
  });
  const width = maxX - minX;
  const total = heights.reduce((a, b) => a + b, 0);
  // A long program is a tall thin column: wrap its layers into side-by-side bands (about 16:10).
  const bandGap = 40;
  let bands = 1;
  if (layers.length > 4 && total > 2 * width && total > 900) {
    bands = Math.round(Math.sqrt((total * 1.6) / Math.max(width, 1)));
    bands = Math.max(1, Math.min(bands, layers.length, Math.floor(1800 / (width + bandGap)) || 1));
  }
  const per = Math.ceil(layers.length / bands);
  let height = 0;
  for (let b = 0; b < bands; b++) {
    let y = 0;
    for (let k = b * per; k < Math.min(layers.length, (b + 1) * per); k++) {
      for (const i of layers[k]) pos.set(items[i].key, { x: b * (width + bandGap) + x[i] - w[i] / 2 - minX, y });
      y += heights[k];
    }
    height = Math.max(height, y - vgap);
  }
  return { pos, width: bands * (width + bandGap) - bandGap, height };
}
