// One drawn graph: collapsible groups laid out as nested layered boxes, pan/zoom, hover,
// highlight, search. Never lays out more than `budget` boxes at once.

import { exportPng, exportSvg } from "./export.js";
import { decorateLoop } from "./loops.js";
import { ancestors, groupPhase, kernelTitle } from "./model.js";
import { BUDGET, FIRST_LIMIT, HEADER, LINE, PAD, buildScene, initialExpansion, pathData, unitKey } from "./scene.js";
import { fmtBytes, h, s } from "./util.js";

let arrowCount = 0;

/** The smallest zoom the view chooses by itself: box labels (11 px) stay 8 px or more on
 * screen. Below it the view scrolls; only the user's own zoom (−, Ctrl+wheel) goes further. */
export const K_MIN = 8 / 11;

/** Fill and stroke for a share of time (0..1): pale yellow to deep red (as report/svg.py). */
export function heatColour(share) {
  const t = Math.sqrt(Math.max(0, Math.min(1, share)));
  const hex = (v) => Math.round(v).toString(16).padStart(2, "0");
  return [`#ff${hex(243 - 131 * t)}${hex(205 - 138 * t)}`, t > 0.5 ? "#b71c1c" : "#e65100"];
}

export class GraphView {
  constructor(pg, { name, colorBy = "kind", budget = BUDGET, initialBudget = FIRST_LIMIT, heat = null, status = null, onActivate, onStatus }) {
    // heat: Map(node id -> share of measured time); status: Map(node id -> added|removed|changed)
    Object.assign(this, { pg, name, colorBy, budget, heat, status, onActivate, onStatus });
    this.expanded = new Set();
    this.hl = new Set();
    this.sel = new Set();
    this.matchIds = [];
    this.cur = -1;
    this.t = { x: 10, y: 10, k: 1 };
    this.fitted = false;
    this.el = h("div", { class: "nbc-canvas", "data-testid": `nbc-canvas-${name}`, tabindex: "0",
      "aria-label": `${name} graph: drag to pan, Ctrl+wheel or +/- to zoom, 0 to fit` });
    // width/height as attributes too: without them an <svg> is 150 px tall wherever the
    // stylesheet has not reached it yet
    this.svg = s("svg", { class: "nbc-svg", role: "group", width: "100%", height: "100%" });
    this.vp = s("g", { class: "nbc-viewport" });
    // one arrow marker per view: a marker in a hidden panel's <svg> would not draw elsewhere
    this.arrowId = `nbc-arrow-${++arrowCount}`;
    const marker = s("marker", { id: this.arrowId, viewBox: "0 0 8 8", refX: 8, refY: 4, markerWidth: 7, markerHeight: 7,
      orient: "auto-start-reverse", markerUnits: "userSpaceOnUse" });
    marker.appendChild(s("path", { d: "M0,0L8,4L0,8z", class: "nbc-arrowhead" }));
    const defs = s("defs", null);
    defs.appendChild(marker);
    this.svg.append(defs, this.vp);
    this.el.appendChild(this.svg);
    this.expandInitially(initialBudget);
    this.installEvents();
  }

  /** The first picture: the user's calls and modules, whole depth levels while they fit. */
  expandInitially(limit, chunkLimit) {
    const pairs = this.colorBy === "phase"; // the Gradient tab: a call opens with its backward group
    for (const gid of initialExpansion(this.pg, limit, this.budget, chunkLimit, true, pairs)) this.expanded.add(gid);
  }

  unitOf(nodeId) {
    return unitKey(this.pg, this.expanded, nodeId);
  }

  visibleCount() {
    const walk = (g) => g.items.reduce((k, it) => k + (it.type === "group" && this.expanded.has(it.id) ? walk(this.pg.groups.get(it.id)) : 1), 0);
    return walk(this.pg.root);
  }

  toggle(gid) {
    if (this.expanded.has(gid)) {
      const twin = this.twinOf(gid); // closes with it, as it opened
      for (const id of twin ? [gid, twin] : [gid]) {
        this.expanded.delete(id);
        for (const g of this.pg.groups.values()) if (ancestorsOfGroup(this.pg, g.id).includes(id)) this.expanded.delete(g.id);
      }
      this.render({ anchor: "g:" + gid });
      return true;
    }
    const g = this.pg.groups.get(gid);
    // in two facing columns a group opens with its twin (`block#3` and `block#3 (backward)`)
    const twinId = this.twinOf(gid);
    const extra = twinId && !this.expanded.has(twinId) ? this.pg.groups.get(twinId).items.length - 1 : 0;
    const after = this.visibleCount() - 1 + g.items.length + extra;
    if (after > this.budget) {
      this.onStatus?.(`Expanding "${g.label}" would draw ${after} boxes (limit ${this.budget}): collapse another group first.`);
      return false;
    }
    this.expanded.add(gid);
    if (twinId) this.expanded.add(twinId);
    this.render();
    const box = this.boxes.get("g:" + gid);
    // fit the group just opened; beside its open forward (or backward) twin, the two of them
    const twin = box && (box.follow?.lead || box.leads);
    if (box && twin) {
      const x = Math.min(box.x, twin.x), y = Math.min(box.y, twin.y);
      this.focusBox({ x, y, w: Math.max(box.x + box.w, twin.x + twin.w) - x, h: Math.max(box.y + box.h, twin.y + twin.h) - y });
    } else if (box) this.focusBox(box);
    return true;
  }

  /** The group drawn facing `gid` (its forward or backward twin in two facing columns), or null. */
  twinOf(gid) {
    const key = "g:" + gid;
    for (const box of this.boxes?.values() || []) {
      const partner = box.mirror?.partner || box.follow?.partner || box.leads?.follow?.partner;
      if (!partner || !box.children?.some((c) => c.key === key)) continue;
      for (const [b, f] of partner) {
        if (b === key) return f.slice(2);
        if (f === key) return b.slice(2);
      }
    }
    return null;
  }

  /** ⊞: open every group, breadth-first, whole levels within the budget. */
  expandAll() {
    for (const gid of initialExpansion(this.pg, this.budget, this.budget, this.budget, false)) this.expanded.add(gid);
    this.render();
    this.fit();
  }

  /** Open one level: every collapsed group whose parent is open (library calls too), in program
   * order while the budget allows. */
  expandLevel() {
    let count = this.visibleCount();
    const next = [];
    const walk = (g) => {
      for (const it of g.items) {
        if (it.type !== "group") continue;
        if (this.expanded.has(it.id)) walk(this.pg.groups.get(it.id));
        else next.push(this.pg.groups.get(it.id));
      }
    };
    walk(this.pg.root);
    let opened = 0;
    for (const g of next) {
      if (count + g.items.length - 1 > this.budget) break;
      this.expanded.add(g.id);
      count += g.items.length - 1;
      opened++;
    }
    if (opened < next.length) this.onStatus?.(`Opened ${opened} of ${next.length} groups (limit ${this.budget} boxes).`);
    this.render();
    this.fit();
    return opened;
  }

  collapseAll() {
    this.expanded.clear();
    this.expandInitially(1);
    this.render();
    this.fit();
  }

  /** Lay out and draw what is visible. */
  render({ anchor } = {}) {
    const t0 = performance.now();
    const before = anchor && this.boxes?.get(anchor);
    const scene = buildScene(this.pg, this.expanded);
    this.scene = scene;
    this.unitOfMap = scene.unitOf;
    this.agg = scene.edges;
    this.boxes = scene.boxes;
    this.draw(scene.root);
    this.layoutMs = performance.now() - t0;
    if (before && this.boxes.get(anchor)) {
      const after = this.boxes.get(anchor);
      this.t.x += (before.x - after.x) * this.t.k;
      this.t.y += (before.y - after.y) * this.t.k;
      this.applyTransform();
    } else if (!this.fitted) this.firstView();
    this.applyClasses();
    this.updateStatus();
  }

  updateStatus() {
    const units = [...this.boxes.values()].filter((b) => !b.children).length;
    const { labels, folded } = this.pg, shown = labels.size - folded.size;
    this.onStatus?.(`${units} boxes drawn for ${this.pg.nodes.length - labels.size} ${this.pg.isCompiled ? "kernels" : "ops"}` +
      (shown ? ` (${shown} parameters/scalars shown as labels)` : "") +
      (folded.size ? ` · ${folded.size} zero-cost bitcasts/copies folded into their neighbours` : "") +
      (this.partial ? " · scroll or drag to see the rest" : ""));
  }

  draw(tree) {
    this.vp.textContent = "";
    const clusters = s("g", { class: "nbc-clusters" });
    const edges = s("g", { class: "nbc-edges" });
    const nodes = s("g", { class: "nbc-nodes" });
    this.vp.append(clusters, edges, nodes);
    this.els = new Map();
    this.edgeEls = [];
    const visit = (box, depth) => {
      if (box.children) {
        if (box.key !== "root") this.drawCluster(clusters, box, depth);
        box.children.forEach((c) => visit(c, depth + 1));
      } else nodes.appendChild(this.drawLeaf(box));
    };
    visit(tree, 0);
    const most = Math.max(1, ...this.agg.map((a) => a.residual || 0));
    for (const a of this.agg) {
      const res = a.residual != null;
      const width = res ? residualWidth(a.residual, most) : Math.min(4, 1 + Math.log2(a.count) / 2);
      // in the two facing columns an upward edge is the backward pass itself: solid, arrow at its top
      const back = a.up && a.columns;
      const el = s("path", { class: res ? "nbc-edge nbc-edge-residual" : back ? "nbc-edge nbc-edge-back" : a.up ? "nbc-edge nbc-edge-up" : "nbc-edge",
        d: pathData(a.points), "stroke-width": width.toFixed(2), "marker-end": a.up ? null : `url(#${this.arrowId})`,
        "marker-start": back ? `url(#${this.arrowId})` : null,
        "data-u": a.u, "data-v": a.v, "data-bytes": res ? a.residual : null });
      el.appendChild(s("title", { text: res ? `residuals saved for the backward pass: ${fmtBytes(a.residual)}`
        : `${a.count} edge${a.count > 1 ? "s" : ""} · ${fmtBytes(a.bytes)}` }));
      edges.appendChild(el);
      if (res) {
        const [p, q] = [a.points[0], a.points[a.points.length - 1]];
        edges.appendChild(s("text", { class: "nbc-edge-label", x: ((p[0] + q[0]) / 2).toFixed(1), y: ((p[1] + q[1]) / 2 - 4).toFixed(1),
          "text-anchor": "middle", text: fmtBytes(a.residual) }));
      }
      this.edgeEls.push([a, el]);
    }
  }

  drawCluster(parent, box, depth) {
    const g = s("g", { class: `nbc-cluster nbc-depth-${depth % 2}` });
    g.appendChild(s("rect", { x: box.x, y: box.y, width: box.w, height: box.h, rx: 6 }));
    const head = s("g", { class: "nbc-cluster-head", "data-testid": "nbc-group", "data-key": box.key,
      "data-group": box.group.id, "aria-expanded": "true", tabindex: "0", role: "button",
      "aria-label": `collapse ${box.group.label}`, ...this.hooks(null, box.group) });
    head.appendChild(s("rect", { x: box.x, y: box.y, width: box.w, height: HEADER - 4, rx: 6 }));
    head.appendChild(s("text", { x: box.x + PAD, y: box.y + 13, text: box.title }));
    decorateLoop(this.pg, head, box, false);
    g.appendChild(head);
    parent.appendChild(g);
    this.els.set(box.key, head);
  }

  drawLeaf(box) {
    const { node, group } = box;
    const fusionNode = node && (node.kind === "fusion" || (node.fusion && this.pg.isCompiled));
    const testid = group ? "nbc-group" : fusionNode ? "nbc-fusion" : "nbc-node";
    const hooks = this.hooks(node, group);
    const phase = node ? node.phase : hooks["data-phase"] || groupPhase(group);
    const kind = node ? node.kind : "group";
    const cls = ["nbc-unit", `nbc-k-${kind}`];
    if (this.colorBy === "phase" && phase) cls.push(`nbc-p-${phase}`);
    const heat = node && this.heat ? this.heat.get(node.id) : undefined;
    const status = node && this.status ? this.status.get(node.id) : undefined;
    if (status) cls.push(`nbc-d-${status}`);
    const g = s("g", { class: cls.join(" "), "data-testid": testid, "data-key": box.key, tabindex: "0", role: "button",
      transform: `translate(${box.x.toFixed(1)},${box.y.toFixed(1)})`,
      "data-id": node?.id, "data-op": node?.op, "data-fusion": node?.fusion, "data-group": group?.id,
      "aria-expanded": group ? "false" : null, "aria-label": box.lines.join(", "), ...hooks });
    g.appendChild(s("rect", { class: "nbc-bg", width: box.w, height: box.h, rx: group ? 6 : 3 }));
    const face = s("rect", { width: box.w, height: box.h, rx: group ? 6 : 3 });
    if (heat !== undefined) {
      const [fill, stroke] = heatColour(heat);
      face.setAttribute("style", `fill:${fill};stroke:${stroke}`);
      g.setAttribute("data-heat", heat.toFixed(4));
    }
    g.appendChild(face);
    box.lines.forEach((t, i) => g.appendChild(s("text", { x: 7, y: 15 + i * LINE, class: i ? "nbc-sub" : "nbc-main", text: t })));
    if (group) decorateLoop(this.pg, g, box, true);
    this.els.set(box.key, g);
    return g;
  }

  /** Test hooks on a drawn box (SPEC §8.1): data-kind, data-name and, in the Gradient tab,
   * data-phase. */
  hooks(node, group) {
    return boxHooks(this.pg, node, group, this.colorBy === "phase");
  }

  /** Highlighted node ids (related to the selection) and selected ones. */
  setHighlight(hl, sel) {
    this.hl = hl;
    this.sel = sel;
    this.applyClasses();
  }

  applyClasses() {
    if (!this.els) return;
    const mark = (ids) => {
      const keys = new Set();
      for (const id of ids) {
        const targets = this.pg.labels.has(id) ? this.pg.labelUsers.get(id) || [] : [id];
        for (const t of targets) { const u = this.unitOfMap.get(t); if (u) keys.add(u); }
      }
      return keys;
    };
    const hl = mark(this.hl), sel = mark(this.sel), match = mark(this.matchIds);
    const cur = this.cur >= 0 ? this.unitOfMap.get(this.matchIds[this.cur]) : null;
    for (const [key, el] of this.els) {
      el.classList.toggle("nbc-hl", hl.has(key));
      el.classList.toggle("nbc-sel", sel.has(key));
      el.classList.toggle("nbc-match", match.has(key));
      el.classList.toggle("nbc-cur", key === cur);
      el.setAttribute("data-highlighted", hl.has(key) || sel.has(key) ? "true" : "false");
    }
  }

  /** Search node ops / labels / names / paths; returns the match count. */
  search(q) {
    q = q.trim().toLowerCase();
    this.matchIds = !q ? [] : this.pg.nodes.filter((n) =>
      [n.op, n.label, n.id, n.path, n.fusion].some((v) => v && String(v).toLowerCase().includes(q))).map((n) => n.id);
    this.cur = -1;
    this.applyClasses();
    return this.matchIds.length;
  }

  nextMatch() {
    if (!this.matchIds.length) return;
    this.cur = (this.cur + 1) % this.matchIds.length;
    this.reveal(this.matchIds[this.cur]);
  }

  /** Expand the groups around a node (within the budget) and centre it. */
  reveal(id) {
    const target = this.pg.labels.has(id) ? (this.pg.labelUsers.get(id) || [])[0] : id;
    if (!target) return;
    let count = this.visibleCount();
    let changed = false;
    for (const gid of ancestors(this.pg, "n:" + target)) {
      if (this.expanded.has(gid)) continue;
      const extra = this.pg.groups.get(gid).items.length - 1;
      if (count + extra > this.budget) break;
      this.expanded.add(gid);
      count += extra;
      changed = true;
    }
    if (changed) this.render();
    this.applyClasses();
    const box = this.boxes.get(this.unitOfMap.get(target));
    if (box) this.centre(box);
  }

  centre(box) {
    const W = this.el.clientWidth || 800, H = this.el.clientHeight || 480;
    this.t.x = W / 2 - (box.x + box.w / 2) * this.t.k;
    this.t.y = H / 2 - (box.y + box.h / 2) * this.t.k;
    this.applyTransform();
  }

  /** The drawing area's height: the window's, less the view's header and toolbar. */
  maxHeight() {
    const view = this.el.ownerDocument?.defaultView;
    return Math.max(320, Math.round((view?.innerHeight || 900) - 110));
  }

  /** First view: the whole graph when it reads with labels of 8 px or more, else as wide as
   * the canvas (at that size or more) from its top, to scroll or drag. */
  firstView() {
    this.fit();
  }

  /** ⤢ / "0": the whole graph when it fits at a legible size (never above 100 %); otherwise it
   * fits the width (never below K_MIN) and the rest scrolls. */
  fit() {
    const root = this.boxes?.get("root");
    const W = this.el.clientWidth;
    if (!root || !W) return;
    this.fitted = true;
    const maxH = this.maxHeight();
    const kW = (W - 20) / Math.max(root.w, 1), kH = (maxH - 24) / Math.max(root.h, 1);
    let k = Math.min(1, kW, kH);
    if (k < K_MIN) k = Math.max(K_MIN, Math.min(1, kW));
    const H = Math.max(160, Math.min(maxH, root.h * k + 24));
    this.el.style.height = H + "px";
    this.partial = root.h * k + 24 > H + 1 || root.w * k + 20 > W + 1;
    this.t = { k, x: Math.max(10, (W - root.w * k) / 2), y: root.h * k + 24 <= H ? (H - root.h * k) / 2 : 12 };
    this.applyTransform();
    if (this.boxes) this.updateStatus();
  }

  /** Bring one box (a group just opened) into view: as large as fits, labels 8 px or more, its
   * top-left corner visible where it does not fit. The canvas grows to the window if needed. */
  focusBox(box) {
    const root = this.boxes?.get("root");
    const W = this.el.clientWidth;
    if (!root || !W) return;
    const maxH = this.maxHeight();
    const H = Math.max(this.el.clientHeight || 0, Math.min(maxH, root.h * this.t.k + 24));
    this.el.style.height = H + "px";
    const k = Math.max(K_MIN, Math.min(1, (W - 20) / Math.max(box.w, 1), (H - 24) / Math.max(box.h, 1)));
    this.t.k = k;
    this.t.x = box.w * k <= W - 20 ? W / 2 - (box.x + box.w / 2) * k : 10 - box.x * k;
    this.t.y = box.h * k <= H - 24 ? H / 2 - (box.y + box.h / 2) * k : 12 - box.y * k;
    this.partial = root.h * k + 24 > H + 1 || root.w * k + 20 > W + 1;
    this.applyTransform();
    this.updateStatus();
  }

  /** Plain wheel: scroll the drawing where it overflows the canvas; at its edge, the page. */
  scrollBy(dx, dy) {
    const root = this.boxes?.get("root");
    if (!root) return false;
    const W = this.el.clientWidth, H = this.el.clientHeight, k = this.t.k;
    const clamp = (v, lo, hi) => Math.max(Math.min(lo, hi), Math.min(Math.max(lo, hi), v));
    const x = clamp(this.t.x - dx, W - 10 - root.w * k, 10), y = clamp(this.t.y - dy, H - 12 - root.h * k, 12);
    if (Math.abs(x - this.t.x) < 0.5 && Math.abs(y - this.t.y) < 0.5) return false;
    this.t.x = x;
    this.t.y = y;
    this.applyTransform();
    return true;
  }

  /** The drawn graph as a standalone SVG document (export.js). */
  exportSvg() {
    return exportSvg(this);
  }

  /** The drawn graph as a PNG Blob (export.js). */
  exportPng() {
    return exportPng(this);
  }

  zoom(f, cx, cy) {
    const W = this.el.clientWidth || 800, H = this.el.clientHeight || 480;
    cx ??= W / 2;
    cy ??= H / 2;
    const k = Math.max(0.05, Math.min(4, this.t.k * f));
    this.t.x = cx - ((cx - this.t.x) * k) / this.t.k;
    this.t.y = cy - ((cy - this.t.y) * k) / this.t.k;
    this.t.k = k;
    this.applyTransform();
  }

  applyTransform() {
    this.vp.setAttribute("transform", `translate(${this.t.x.toFixed(1)},${this.t.y.toFixed(1)}) scale(${this.t.k.toFixed(4)})`);
  }

  installEvents() {
    const keyOf = (ev) => ev.target.closest?.("[data-key]");
    const activate = (el) => {
      const key = el.getAttribute("data-key");
      if (key.startsWith("g:")) {
        const gid = key.slice(2);
        this.toggle(gid);
        this.onActivate?.("group", gid);
        this.els.get(key)?.focus({ preventScroll: true });
      } else this.onActivate?.("node", key.slice(2));
    };
    let drag = null;
    this.svg.addEventListener("pointerdown", (ev) => {
      drag = { x: ev.clientX, y: ev.clientY, tx: this.t.x, ty: this.t.y, moved: false };
    });
    this.svg.addEventListener("pointermove", (ev) => {
      if (!drag) return;
      const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
      if (!drag.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
      if (!drag.moved) this.svg.setPointerCapture?.(ev.pointerId);
      drag.moved = true;
      this.t.x = drag.tx + dx;
      this.t.y = drag.ty + dy;
      this.applyTransform();
    });
    const end = (ev) => { if (drag?.moved) this.svg.releasePointerCapture?.(ev.pointerId); };
    this.svg.addEventListener("pointerup", end);
    this.svg.addEventListener("click", (ev) => {
      const moved = drag?.moved;
      drag = null;
      if (moved) return;
      const el = keyOf(ev);
      if (el) activate(el);
    });
    this.svg.addEventListener("keydown", (ev) => {
      const el = keyOf(ev);
      if (el && (ev.key === "Enter" || ev.key === " ")) { ev.preventDefault(); activate(el); }
    });
    this.el.addEventListener("keydown", (ev) => {
      if (ev.target !== this.el) return;
      const step = 60;
      const moves = { ArrowLeft: [step, 0], ArrowRight: [-step, 0], ArrowUp: [0, step], ArrowDown: [0, -step] };
      if (moves[ev.key]) { this.t.x += moves[ev.key][0]; this.t.y += moves[ev.key][1]; this.applyTransform(); }
      else if (ev.key === "+" || ev.key === "=") this.zoom(1.25);
      else if (ev.key === "-") this.zoom(0.8);
      else if (ev.key === "0") this.fit();
      else return;
      ev.preventDefault();
    });
    this.el.addEventListener("wheel", (ev) => {
      if (!ev.ctrlKey && !ev.metaKey) {
        // plain wheel scrolls a drawing taller or wider than the canvas, else the notebook
        if (this.scrollBy(ev.shiftKey ? ev.deltaY : ev.deltaX, ev.shiftKey ? 0 : ev.deltaY)) ev.preventDefault();
        return;
      }
      ev.preventDefault();
      const r = this.el.getBoundingClientRect();
      this.zoom(Math.exp(-ev.deltaY / 300), ev.clientX - r.left, ev.clientY - r.top);
    }, { passive: false });
    this.svg.addEventListener("mouseover", (ev) => this.hover(keyOf(ev)?.getAttribute("data-key")));
    this.svg.addEventListener("mouseleave", () => this.hover(null));
  }

  /** Hover: mark the producers (in) and consumers (out) of the box under the pointer. */
  hover(key) {
    if (key === this.hoverKey) return;
    this.hoverKey = key;
    for (const el of this.vp.querySelectorAll(".nbc-in, .nbc-out, .nbc-hover")) el.classList.remove("nbc-in", "nbc-out", "nbc-hover");
    if (!key) return;
    this.els.get(key)?.classList.add("nbc-hover");
    for (const [a, el] of this.edgeEls) {
      if (a.v === key) { el.classList.add("nbc-in"); this.els.get(a.u)?.classList.add("nbc-in"); }
      if (a.u === key) { el.classList.add("nbc-out"); this.els.get(a.v)?.classList.add("nbc-out"); }
    }
  }
}

/** A residual edge's stroke width: 1.5 to 7 px by its share of the largest residual. */
export function residualWidth(bytes, most) {
  return 1.5 + 5.5 * Math.sqrt(Math.max(0, bytes) / Math.max(1, most));
}

/** data-kind (group | op | fusion | output | input), data-name (the label) and, with `phases`,
 * data-phase (forward | backward | mixed) of a box; report/svg.py writes the same. */
export function boxHooks(pg, node, group, phases) {
  let kind = "group", name = group?.label, phase = null, kernel = null;
  if (node) {
    kind = node.kind === "fusion" || (node.fusion && pg.isCompiled) ? "fusion" : node.kind === "output" ? "output"
      : node.kind === "param" || node.kind === "const" ? "input" : "op";
    name = node.label || node.op;
    // a kernel is named in the user's words (`layer#3 · matmul`); data-kernel keeps XLA's name
    if (pg.isCompiled && (kind === "fusion" || kind === "op")) [name, kernel] = [kernelTitle(pg, node), node.label || node.op];
    phase = node.phase;
  } else if (group) phase = group.label.endsWith(" (backward)") ? "backward" : groupPhase(group);
  // data-in: the labels of the groups holding the box, outermost first (`mlp#1/layer#3`)
  const key = node ? "n:" + node.id : "g:" + group?.id;
  const holders = ancestors(pg, key).map((gid) => pg.groups.get(gid)).filter((g) => !["chunk", "across", "rest"].includes(g.kind));
  return { "data-kind": kind, "data-name": name, "data-kernel": kernel, "data-in": holders.map((g) => g.label).join("/") || null,
    "data-phase": phases ? phase || null : null };
}

function ancestorsOfGroup(pg, gid) {
  return ancestors(pg, "g:" + gid);
}
