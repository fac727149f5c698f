// One drawn graph: collapsible groups laid out as nested layered boxes, pan/zoom, hover,
// highlight, search. Never lays out more than `budget` boxes at once.

import { layered } from "./layout.js";
import { ancestors, groupPhase, topOps } from "./model.js";
import { fmtBytes, fmtNum, h, s, trunc } from "./util.js";

const CH = 6.7; // px per character of the 11px monospace label font
const LINE = 14;
const PAD = 10;
const HEADER = 22;
const MAXW = 250;

export class GraphView {
  constructor(pg, { name, colorBy = "kind", budget = 400, initialBudget = 80, onActivate, onStatus }) {
    Object.assign(this, { pg, name, colorBy, budget, onActivate, onStatus });
    this.expanded = new Set();
    this.hl = new Set();
    this.sel = new Set();
    this.matchIds = [];
    this.cur = -1;
    this.t = { x: 10, y: 10, k: 1 };
    this.fitted = false;
    this.el = h("div", { class: "nbc-canvas", "data-testid": `nbc-canvas-${name}`, tabindex: "0",
      "aria-label": `${name} graph: drag to pan, Ctrl+wheel or +/- to zoom, 0 to fit` });
    this.svg = s("svg", { class: "nbc-svg", role: "group" });
    this.vp = s("g", { class: "nbc-viewport" });
    this.svg.appendChild(this.vp);
    this.el.appendChild(this.svg);
    this.expandInitially(initialBudget);
    this.installEvents();
  }

  /** Expand breadth-first, one whole depth level at a time, while the level fits the budget. */
  expandInitially(limit) {
    let level = [this.pg.root];
    let count = this.pg.root.items.length;
    while (level.length) {
      const groups = level.flatMap((g) => g.items.filter((it) => it.type === "group").map((it) => this.pg.groups.get(it.id)));
      const extra = groups.reduce((k, g) => k + g.items.length - 1, 0);
      if (!groups.length || (count + extra > limit && !(groups.length === 1 && count + extra <= this.budget))) break;
      groups.forEach((g) => this.expanded.add(g.id));
      count += extra;
      level = groups;
    }
  }

  unitOf(nodeId) {
    for (const gid of ancestors(this.pg, "n:" + nodeId)) if (!this.expanded.has(gid)) return "g:" + gid;
    return "n:" + nodeId;
  }

  visibleCount() {
    const walk = (g) => g.items.reduce((k, it) => k + (it.type === "group" && this.expanded.has(it.id) ? walk(this.pg.groups.get(it.id)) : 1), 0);
    return walk(this.pg.root);
  }

  toggle(gid) {
    if (this.expanded.has(gid)) {
      this.expanded.delete(gid);
      for (const g of this.pg.groups.values()) if (ancestorsOfGroup(this.pg, g.id).includes(gid)) this.expanded.delete(g.id);
      this.render({ anchor: "g:" + gid });
      return true;
    }
    const g = this.pg.groups.get(gid);
    const after = this.visibleCount() - 1 + g.items.length;
    if (after > this.budget) {
      this.onStatus?.(`Expanding "${g.label}" would draw ${after} boxes (limit ${this.budget}): collapse another group first.`);
      return false;
    }
    this.expanded.add(gid);
    this.render({ anchor: "g:" + gid });
    return true;
  }

  expandAll() {
    this.expandInitially(this.budget);
    this.render();
  }

  collapseAll() {
    this.expanded.clear();
    this.expandInitially(1);
    this.render();
  }

  /** Lay out and draw what is visible. */
  render({ anchor } = {}) {
    const t0 = performance.now();
    const before = anchor && this.boxes?.get(anchor);
    const unitOf = new Map();
    for (const n of this.pg.nodes) if (!this.pg.labels.has(n.id)) unitOf.set(n.id, this.unitOf(n.id));
    this.unitOfMap = unitOf;
    const tree = this.buildTree(this.pg.root, "root");
    const agg = new Map();
    for (const e of this.pg.edges) {
      const u = unitOf.get(e.src), v = unitOf.get(e.dst);
      if (!u || !v || u === v) continue;
      const k = u + "\u0001" + v;
      const a = agg.get(k);
      if (a) { a.count++; a.bytes += e.bytes || 0; } else agg.set(k, { u, v, count: 1, bytes: e.bytes || 0 });
    }
    this.agg = [...agg.values()];
    const perBox = new Map();
    for (const a of this.agg) {
      const [cu, cv, box] = lift(this.pg, a.u, a.v);
      (perBox.get(box) || perBox.set(box, []).get(box)).push([cu, cv]);
    }
    this.layoutBox(tree, perBox);
    this.boxes = new Map();
    this.place(tree, 0, 0);
    this.draw(tree);
    this.layoutMs = performance.now() - t0;
    if (before && this.boxes.get(anchor)) {
      const after = this.boxes.get(anchor);
      this.t.x += (before.x - after.x) * this.t.k;
      this.t.y += (before.y - after.y) * this.t.k;
      this.applyTransform();
    } else if (!this.fitted) this.fit();
    this.applyClasses();
    const units = [...this.boxes.values()].filter((b) => !b.children).length;
    this.onStatus?.(`${units} boxes drawn for ${this.pg.nodes.length - this.pg.labels.size} ops` +
      (this.pg.labels.size ? ` (${this.pg.labels.size} parameters/scalars shown as labels)` : ""));
  }

  buildTree(g, key) {
    const children = g.items.map((it) => {
      if (it.type === "node") return { key: "n:" + it.id, node: this.pg.byId.get(it.id) };
      const c = this.pg.groups.get(it.id);
      return this.expanded.has(c.id) ? this.buildTree(c, "g:" + c.id) : { key: "g:" + c.id, group: c };
    });
    return { key, group: g, children };
  }

  layoutBox(box, perBox) {
    for (const c of box.children) {
      if (c.children) this.layoutBox(c, perBox);
      else Object.assign(c, this.leafText(c));
    }
    box.inner = layered(box.children.map((c) => ({ key: c.key, w: c.w, h: c.h })), perBox.get(box.key) || []);
    const root = box.key === "root";
    box.title = root ? "" : `▾ ${trunc(box.group.label, 40)} · ${box.group.kind} · ${fmtNum(box.group.count)} ops`;
    const minW = root ? 0 : box.title.length * CH + 2 * PAD;
    box.w = Math.max(box.inner.width + (root ? 0 : 2 * PAD), minW);
    box.h = box.inner.height + (root ? 0 : HEADER + PAD);
    box.dx = (box.w - box.inner.width) / 2;
  }

  place(box, x, y) {
    Object.assign(box, { x, y });
    this.boxes.set(box.key, box);
    if (!box.children) return;
    const oy = box.key === "root" ? 0 : HEADER;
    for (const c of box.children) {
      const p = box.inner.pos.get(c.key);
      this.place(c, x + box.dx + p.x, y + oy + p.y);
    }
  }

  leafText(c) {
    let lines;
    if (c.node) {
      const n = c.node;
      const fusion = this.pg.isCompiled && n.fusion ? this.pg.fusionById.get(n.fusion) : null;
      const ins = (this.pg.inLabels.get(n.id) || []).map((id) => this.pg.byId.get(id).label || id);
      if (fusion || n.kind === "fusion") {
        lines = [`${n.label || n.op}${fusion ? " · " + fusion.kind : ""}`, (fusion?.ops || []).join("+") || n.shape, n.shape + (n.line != null ? ` · L${n.line}` : "")];
      } else {
        lines = [n.label && n.label !== n.op ? `${n.op} ${n.label}` : n.op, (n.shape || "") + (n.line != null ? ` · L${n.line}` : "")];
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
    for (const a of this.agg) {
      const p = this.boxes.get(a.u), q = this.boxes.get(a.v);
      const x1 = p.x + p.w / 2, y1 = p.y + p.h, x2 = q.x + q.w / 2, y2 = q.y;
      const dy = Math.max(20, Math.abs(y2 - y1) / 2);
      const el = s("path", { class: y2 < y1 ? "nbc-edge nbc-edge-up" : "nbc-edge", d: `M${x1},${y1} C${x1},${y1 + dy} ${x2},${y2 - dy} ${x2},${y2}`,
        "stroke-width": Math.min(4, 1 + Math.log2(a.count) / 2).toFixed(2) });
      el.appendChild(s("title", { text: `${a.count} edge${a.count > 1 ? "s" : ""} · ${fmtBytes(a.bytes)}` }));
      edges.appendChild(el);
      this.edgeEls.push([a, el]);
    }
  }

  drawCluster(parent, box, depth) {
    const g = s("g", { class: `nbc-cluster nbc-depth-${depth % 2}` });
    g.appendChild(s("rect", { x: box.x, y: box.y, width: box.w, height: box.h, rx: 6 }));
    const head = s("g", { class: "nbc-cluster-head", "data-testid": "nbc-group", "data-key": box.key,
      "data-group": box.group.id, "aria-expanded": "true", tabindex: "0", role: "button",
      "aria-label": `collapse ${box.group.label}` });
    head.appendChild(s("rect", { x: box.x, y: box.y, width: box.w, height: HEADER - 4, rx: 6 }));
    head.appendChild(s("text", { x: box.x + PAD, y: box.y + 13, text: box.title }));
    g.appendChild(head);
    parent.appendChild(g);
    this.els.set(box.key, head);
  }

  drawLeaf(box) {
    const { node, group } = box;
    const fusionNode = node && (node.kind === "fusion" || (node.fusion && this.pg.isCompiled));
    const testid = group ? "nbc-group" : fusionNode ? "nbc-fusion" : "nbc-node";
    const phase = node ? node.phase : groupPhase(group);
    const kind = node ? node.kind : "group";
    const cls = ["nbc-unit", `nbc-k-${kind}`];
    if (this.colorBy === "phase" && phase) cls.push(`nbc-p-${phase}`);
    const g = s("g", { class: cls.join(" "), "data-testid": testid, "data-key": box.key, tabindex: "0", role: "button",
      transform: `translate(${box.x.toFixed(1)},${box.y.toFixed(1)})`,
      "data-id": node?.id, "data-op": node?.op, "data-fusion": node?.fusion, "data-group": group?.id,
      "aria-expanded": group ? "false" : null, "aria-label": box.lines.join(", ") });
    g.appendChild(s("rect", { class: "nbc-bg", width: box.w, height: box.h, rx: group ? 6 : 3 }));
    g.appendChild(s("rect", { width: box.w, height: box.h, rx: group ? 6 : 3 }));
    box.lines.forEach((t, i) => g.appendChild(s("text", { x: 7, y: 15 + i * LINE, class: i ? "nbc-sub" : "nbc-main", text: t })));
    this.els.set(box.key, g);
    return g;
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

  fit() {
    const root = this.boxes?.get("root");
    const W = this.el.clientWidth;
    if (!root || !W) return;
    this.fitted = true;
    const k = Math.min(1, (W - 20) / Math.max(root.w, 1));
    const H = Math.max(160, Math.min(560, root.h * k + 24));
    this.el.style.height = H + "px";
    this.t = { k, x: (W - root.w * k) / 2, y: 12 };
    this.applyTransform();
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
      if (!ev.ctrlKey && !ev.metaKey) return; // plain wheel scrolls the notebook
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

function ancestorsOfGroup(pg, gid) {
  return ancestors(pg, "g:" + gid);
}

/** The layout box an edge belongs to and its two endpoints lifted to that box's children. */
function lift(pg, u, v) {
  const au = ancestors(pg, u), av = ancestors(pg, v);
  let i = 0;
  while (i < au.length && i < av.length && au[i] === av[i]) i++;
  const box = i === 0 ? "root" : "g:" + au[i - 1];
  return [i < au.length ? "g:" + au[i] : u, i < av.length ? "g:" + av[i] : v, box];
}
