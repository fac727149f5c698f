// render(el, report, opts): the whole view. Used by the anywidget front end and the static HTML.
//
// opts: {tab, selected, onTab(tab), onSelect(selected), budget, initialBudget}. Returns a view
// object: {ready: Promise, select(sel), setTab(tab), destroy(), timings}. `selected` strings are
// "traced:<node id>", "compiled:<node id>", "fusion:<id>", "line:<n>", "group:<graph>:<id>" or "".

import { GraphView } from "./graphview.js";
import { decodeReport, prepareGraph } from "./model.js";
import { detailsFor, fusionTable, gradientPanel, sourcePanel, statsPanel } from "./panels.js";
import CSS from "./style.css";
import { fmtNum, fmtSeconds, h } from "./util.js";

const TABS = [["graph", "Graph"], ["compiled", "Compiled"], ["source", "Source"], ["gradient", "Gradient"], ["stats", "Stats"]];

function injectStyle(el) {
  const doc = el.ownerDocument || document;
  if (doc.getElementById("nbc-style")) return;
  const style = doc.createElement("style");
  style.id = "nbc-style";
  style.textContent = CSS;
  (doc.head || doc.documentElement).appendChild(style);
}

export function render(el, data, opts = {}) {
  const t0 = performance.now();
  injectStyle(el);
  el.classList.add("nbc-root");
  el.textContent = "";
  el.appendChild(h("div", { class: "nbc-loading" }, "nbcompile: loading the report…"));
  const view = { timings: {}, destroyed: false, t0 };
  view.ready = decodeReport(data).then((report) => {
    view.timings.decode = performance.now() - t0;
    if (!view.destroyed) build(el, report, opts, view);
    view.timings.built = performance.now() - t0;
    // First paint: the frame after the DOM is built has been painted.
    return new Promise((resolve) => requestAnimationFrame(() => setTimeout(() => {
      view.timings.firstPaint = performance.now() - t0;
      el.setAttribute("data-first-paint-ms", view.timings.firstPaint.toFixed(1));
      resolve(view);
    }, 0)));
  }).catch((err) => {
    el.textContent = "";
    el.appendChild(h("div", { class: "nbc-error", "data-testid": "nbc-error" }, "nbcompile view: " + (err?.message || err)));
    throw err;
  });
  view.destroy = () => { view.destroyed = true; el.textContent = ""; };
  view.select = (sel) => { opts.selected = sel; };
  view.setTab = (tab) => { opts.tab = tab; };
  return view;
}

function build(el, report, opts, view) {
  const state = { tab: null, selected: opts.selected || "", query: "" };
  const traced = prepareGraph(report.graphs.traced, report);
  const compiled = report.graphs.compiled ? prepareGraph(report.graphs.compiled, report) : null;
  // `graphs.gradient` (the value_and_grad program) when the report has it, else the traced graph.
  const gradient = report.graphs.gradient ? prepareGraph(report.graphs.gradient, report) : null;
  const pgs = { traced, compiled, gradient };
  const graphOfTab = (tab) => (tab === "compiled" ? "compiled" : tab === "gradient" && gradient ? "gradient" : "traced");
  view.timings.prepared = performance.now() - view.t0;
  const has = { graph: true, compiled: !!compiled, source: (report.source?.lines || []).length > 0, gradient: !!report.gradient, stats: true };
  const panels = new Map(), graphs = new Map(), tabBtns = new Map();
  const status = h("div", { class: "nbc-status", "data-testid": "nbc-status", "aria-live": "polite" });
  const details = h("aside", { class: "nbc-details", "data-testid": "nbc-details", "aria-label": "details" });
  const search = h("input", { class: "nbc-search", "data-testid": "nbc-search", type: "search", placeholder: "search op or name…",
    "aria-label": "search ops and names (Enter: next match)" });
  const count = h("span", { class: "nbc-count", "data-testid": "nbc-match-count", "aria-live": "polite" }, "");
  const budget = opts.budget || 400, initialBudget = opts.initialBudget || 120;

  const graphFor = (tab) => {
    if (graphs.has(tab)) return graphs.get(tab);
    const gname = graphOfTab(tab);
    const gv = new GraphView(pgs[gname], { name: tab, colorBy: tab === "gradient" ? "phase" : "kind", budget, initialBudget,
      onStatus: (msg) => { if (state.tab === tab) status.textContent = msg; },
      onActivate: (kind, id) => select(kind === "group" ? `group:${gname}:${id}` : `${gname}:${id}`) });
    gv.graphName = gname;
    graphs.set(tab, gv);
    return gv;
  };

  const makePanel = (tab) => {
    const p = h("div", { class: "nbc-panel", "data-testid": `nbc-panel-${tab}`, role: "tabpanel" });
    if (tab === "graph" || tab === "compiled" || tab === "gradient") {
      if (tab === "gradient") p.appendChild(gradientPanel(report));
      const gv = graphFor(tab);
      p.appendChild(gv.el);
      if (tab === "compiled") p.appendChild(fusionTable(report, select));
    } else if (tab === "source") p.appendChild(sourcePanel(report, select));
    else p.appendChild(statsPanel(report));
    return p;
  };

  const body = h("div", { class: "nbc-main" });
  const setTab = (tab, { silent } = {}) => {
    if (!has[tab]) tab = "graph";
    if (state.tab === tab) return;
    state.tab = tab;
    for (const [t, b] of tabBtns) { b.setAttribute("aria-selected", String(t === tab)); b.tabIndex = t === tab ? 0 : -1; }
    for (const p of panels.values()) p.hidden = true;
    let p = panels.get(tab);
    if (!p) { p = makePanel(tab); panels.set(tab, p); body.appendChild(p); }
    p.hidden = false;
    const gv = graphs.get(tab);
    if (gv && !gv.boxes) gv.render();
    else if (gv) { if (!gv.fitted) gv.fit(); gv.render(); }
    if (!gv) status.textContent = "";
    applySelection();
    runSearch();
    if (!silent) opts.onTab?.(tab);
  };

  const runSearch = () => {
    const q = state.query;
    const gv = graphs.get(state.tab);
    if (gv) {
      const n = gv.search(q);
      count.textContent = q ? `${n} match${n === 1 ? "" : "es"}` : "";
    } else if (state.tab === "source") {
      let n = 0;
      for (const row of panels.get("source").querySelectorAll(".nbc-line")) {
        const hit = !!q && row.textContent.toLowerCase().includes(q.toLowerCase());
        row.classList.toggle("nbc-match", hit);
        n += hit;
      }
      count.textContent = q ? `${n} line${n === 1 ? "" : "s"}` : "";
    } else count.textContent = "";
  };
  search.addEventListener("input", () => { state.query = search.value; runSearch(); });
  search.addEventListener("keydown", (ev) => { if (ev.key === "Enter") { ev.preventDefault(); graphs.get(state.tab)?.nextMatch(); } });

  function resolve(sel) {
    const out = { hl: { traced: new Set(), compiled: new Set(), gradient: new Set() },
      sel: { traced: new Set(), compiled: new Set(), gradient: new Set() }, lines: new Set(), info: { type: "none" } };
    const addFusion = (fid) => {
      const f = traced.fusionById.get(fid);
      if (!f) return;
      (f.nodes || []).forEach((id) => out.hl.compiled.add(id));
      for (const name of ["traced", "compiled", "gradient"]) (pgs[name]?.fusionNodes.get(fid) || []).forEach((id) => out.hl[name].add(id));
      (f.lines || []).forEach((l) => out.lines.add(l));
    };
    const [kind, ...rest] = sel.split(":");
    const id = rest.join(":");
    if (kind in pgs && id) {
      const n = pgs[kind]?.byId.get(id);
      if (n) {
        out.sel[kind].add(id);
        if (n.line != null) out.lines.add(n.line);
        if (n.fusion) addFusion(n.fusion);
        out.info = { type: "node", graph: kind, id };
      }
    } else if (kind === "fusion") { addFusion(id); out.info = { type: "fusion", id }; }
    else if (kind === "line") {
      const line = Number(id);
      const e = report.lines?.[String(line)];
      (e?.nodes || []).forEach((x) => out.hl.traced.add(x));
      (e?.fusions || []).forEach(addFusion);
      for (const name of ["traced", "compiled", "gradient"]) for (const n of pgs[name]?.nodes || []) if (n.line === line) out.hl[name].add(n.id);
      out.lines = new Set([line]);
      out.info = { type: "line", line };
    } else if (kind === "group") {
      const [graph, ...gid] = rest;
      out.info = { type: "group", graph, id: gid.join(":") };
    }
    return out;
  }

  function applySelection() {
    const r = resolve(state.selected);
    for (const gv of graphs.values()) gv.setHighlight(r.hl[gv.graphName], r.sel[gv.graphName]);
    const src = panels.get("source");
    if (src) {
      for (const row of src.querySelectorAll(".nbc-line")) {
        const on = r.lines.has(Number(row.getAttribute("data-line")));
        row.classList.toggle("nbc-hl", on);
        row.setAttribute("data-highlighted", String(on));
      }
    }
    details.textContent = "";
    details.appendChild(detailsFor(report, r.info, { pgs, select }));
  }

  function select(sel, { silent } = {}) {
    state.selected = sel || "";
    applySelection();
    if (!silent) opts.onSelect?.(state.selected);
  }

  el.textContent = "";
  const s = report.summary || {};
  const tabBar = h("div", { class: "nbc-tabs", role: "tablist", "aria-label": "nbcompile views" });
  for (const [tab, label] of TABS) {
    if (!has[tab]) continue;
    const b = h("button", { class: "nbc-tab", type: "button", role: "tab", "data-testid": `nbc-tab-${tab}`, "aria-selected": "false" }, label);
    b.addEventListener("click", () => setTab(tab));
    b.addEventListener("keydown", (ev) => {
      const order = [...tabBtns.keys()];
      const i = order.indexOf(tab);
      const next = ev.key === "ArrowRight" ? order[(i + 1) % order.length] : ev.key === "ArrowLeft" ? order[(i - 1 + order.length) % order.length] : null;
      if (next) { ev.preventDefault(); setTab(next); tabBtns.get(next).focus(); }
    });
    tabBtns.set(tab, b);
    tabBar.appendChild(b);
  }
  const btn = (label, testid, title, fn) => {
    const b = h("button", { class: "nbc-btn", type: "button", "data-testid": testid, title, "aria-label": title }, label);
    b.addEventListener("click", () => { const gv = graphs.get(state.tab); if (gv) fn(gv); });
    return b;
  };
  const header = h("div", { class: "nbc-header" },
    h("span", { class: "nbc-title" }, `nbcompile · ${report.name} · ${report.backend}`),
    chip(`${fmtNum(s.eager_kernels)} → ${fmtNum(s.kernels)} kernels`, "ops run op by op (eager) → kernels after XLA"),
    chip(`${fmtNum(s.fusions)} fusions`), chip(`${fmtNum(s.flops)} flops`), chip(`compile ${fmtSeconds(s.compile_seconds)}`));
  const toolbar = h("div", { class: "nbc-toolbar" }, tabBar, h("span", { class: "nbc-spacer" }), search, count,
    btn("⊞", "nbc-expand-all", "expand groups (within the node budget)", (gv) => gv.expandAll()),
    btn("⊟", "nbc-collapse-all", "collapse all groups", (gv) => gv.collapseAll()),
    btn("+", "nbc-zoom-in", "zoom in", (gv) => gv.zoom(1.25)), btn("−", "nbc-zoom-out", "zoom out", (gv) => gv.zoom(0.8)),
    btn("⤢", "nbc-fit", "fit to width", (gv) => gv.fit()));
  const notes = (report.notes || []).length ? h("ul", { class: "nbc-notes", "data-testid": "nbc-notes" }, report.notes.map((n) => h("li", null, n))) : null;
  el.append(header, notes || "", toolbar, h("div", { class: "nbc-body" }, h("div", { class: "nbc-left" }, status, body), details));
  setTab(has[opts.tab] ? opts.tab : "graph", { silent: true });
  view.select = (sel) => { if ((sel || "") !== state.selected) select(sel, { silent: true }); };
  view.setTab = (tab) => setTab(tab, { silent: true });
  view.report = report;
  view.graphs = graphs;
}

function chip(text, title) {
  return h("span", { class: "nbc-hchip", title }, text);
}
