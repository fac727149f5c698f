// render(el, report, opts): the whole view. Used by the anywidget front end and the static HTML.
//
// opts: {tab, selected, onTab(tab), onSelect(selected), budget, initialBudget}. Returns a view
// object: {ready: Promise, select(sel), setTab(tab), destroy(), timings}. `selected` strings are
// "traced:<node id>", "compiled:<node id>", "fusion:<id>", "line:<key>", "group:<graph>:<id>" or "".
// A diff report (schema nbcompile.diff/1, from c_new.diff(c_old)) is drawn by diff.js.

import { renderDiff } from "./diff.js";
import { GraphView } from "./graphview.js";
import { BUDGET, FIRST_LIMIT, INITIAL_LIMIT } from "./scene.js";
import { decodeReport, prepareGraph } from "./model.js";
import { detailsFor, fusionTable, gradientPanel } from "./panels.js";
import { kernelCodeOf, kernelCodePanel, passesPanel } from "./passes.js";
import { sourcePanel } from "./source.js";
import { fromOf, statsPanel } from "./stats.js";
import CSS from "./style.css";
import { activatable, fmtNum, fmtSeconds, h } from "./util.js";

const TABS = [["graph", "Graph"], ["compiled", "Compiled"], ["passes", "Passes"], ["source", "Source"], ["gradient", "Gradient"], ["stats", "Stats"], ["diff", "Diff"]];

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
    if (!view.destroyed) {
      if (report.schema === "nbcompile.diff/1") { el.textContent = ""; renderDiff(el, report, view); } else build(el, report, opts, view);
    }
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

/** Compiled-graph node id -> share of measured time, from the profile's kernels (by HLO name). */
function timeHeat(report, graph) {
  const p = report.extras?.profile;
  if (!p || !graph) return null;
  const share = new Map((p.kernels || []).map((k) => [k.name, k.share || 0]));
  const max = Math.max(1e-12, ...share.values());
  const out = new Map();
  for (const n of graph.nodes || []) if (share.has(n.label)) out.set(n.id, share.get(n.label) / max);
  return out.size ? out : null;
}

/** Download a Blob or text under a file name (an <a download>). */
function download(doc, name, blob) {
  const url = URL.createObjectURL(blob);
  const a = doc.createElement("a");
  a.href = url;
  a.download = name;
  a.style.display = "none";
  doc.body.appendChild(a);
  a.click();
  setTimeout(() => { URL.revokeObjectURL(url); a.remove(); }, 1000);
}

function build(el, report, opts, view) {
  const state = { tab: null, selected: opts.selected || "", query: "" };
  const traced = prepareGraph(report.graphs.traced, report);
  // the other graphs are prepared when first used (a tab, a selection): not before the first paint
  // `graphs.gradient` (the value_and_grad program) when the report has it
  const pgs = { traced };
  for (const name of ["compiled", "gradient", "gradient_compiled"]) {
    let pg;
    Object.defineProperty(pgs, name, { enumerable: true,
      get: () => (pg === undefined ? (pg = report.graphs[name] ? prepareGraph(report.graphs[name], report) : null) : pg) });
  }
  // with --grad the Compiled tab draws the train step's kernels (forward and backward), or on
  // request the forward program's alone
  const hasStep = !!report.graphs.gradient_compiled && !!report.graphs.compiled;
  const gkey = (tab) => (tab === "compiled" && state.step ? "compiled-step" : tab);
  const graphOfTab = (tab) => (tab === "compiled" ? (state.step ? "gradient_compiled" : "compiled")
    : tab === "gradient" && report.graphs.gradient ? "gradient" : "traced");
  const heat = timeHeat(report, report.graphs.compiled);
  state.step = hasStep && !heat; // a profiled forward program first, coloured by measured time
  const diff = report.extras?.changes?.diff || null;
  view.timings.prepared = performance.now() - view.t0;
  const has = { graph: true, compiled: !!report.graphs.compiled, source: (report.source?.lines || []).length > 0 || (report.sources || []).length > 0,
    gradient: !!report.gradient, stats: true, diff: !!diff, passes: !!report.extras?.passes?.steps?.length };
  // the kernel code panel of the Compiled tab: only with XLA's dump (--passes, or c.passes read)
  const codeHolder = report.extras?.passes ? h("div", { class: "nbc-kcode-holder", "data-testid": "nbc-kernel-code-holder" }) : null;
  let codeShown = null;
  const panels = new Map(), graphs = new Map(), tabBtns = new Map();
  const status = h("div", { class: "nbc-status", "data-testid": "nbc-status", "aria-live": "polite" });
  const details = h("aside", { class: "nbc-details", "data-testid": "nbc-details", "aria-label": "details" });
  const search = h("input", { class: "nbc-search", "data-testid": "nbc-search", type: "search", placeholder: "search op or name…",
    "aria-label": "search ops and names (Enter: next match)" });
  const count = h("span", { class: "nbc-count", "data-testid": "nbc-match-count", "aria-live": "polite" }, "");
  const budget = opts.budget || BUDGET;
  // the first picture: the user's calls and modules (at most FIRST_LIMIT boxes); the Gradient
  // tab's two facing columns have room for twice as many
  const initialBudget = (tab) => opts.initialBudget || (tab === "gradient" ? INITIAL_LIMIT : FIRST_LIMIT);

  const graphFor = (tab) => {
    if (graphs.has(gkey(tab))) return graphs.get(gkey(tab));
    const gname = graphOfTab(tab);
    const colorBy = tab === "gradient" ? "phase" : "kind";
    const gv = new GraphView(pgs[gname], { name: tab, colorBy, budget, initialBudget: initialBudget(tab), heat: gname === "compiled" ? heat : null,
      onStatus: (msg) => { if (state.tab === tab) status.textContent = msg; },
      onActivate: (kind, id) => select(kind === "group" ? `group:${gname}:${id}` : `${gname}:${id}`) });
    gv.graphName = gname;
    graphs.set(gkey(tab), gv);
    return gv;
  };

  const makePanel = (tab) => {
    const p = h("div", { class: "nbc-panel", "data-testid": `nbc-panel-${tab}`, role: "tabpanel" });
    if (tab === "graph" || tab === "compiled" || tab === "gradient") {
      if (tab === "gradient") p.appendChild(gradientPanel(report));
      if (tab === "compiled" && heat) {
        p.appendChild(h("div", { class: "nbc-legend", "data-testid": "nbc-time-legend" }, "kernels coloured by measured time: ",
          h("span", { class: "nbc-swatch nbc-heat-lo" }), "little ", h("span", { class: "nbc-swatch nbc-heat-hi" }), "most",
          ` (source: ${report.extras.profile.source || "measured"})`));
      }
      if (tab === "compiled" && hasStep) p.appendChild(stepSwitch());
      const holder = h("div", { class: "nbc-graph-holder" });
      p.appendChild(holder);
      fillGraph(tab, holder);
    } else if (tab === "source") p.appendChild(sourcePanel(report, select));
    else if (tab === "diff") {
      const holder = h("div", { class: "nbc-diff-holder", "data-testid": "nbc-diff-holder" });
      p.appendChild(holder);
      renderDiff(holder, diff, { timings: {} });
    } else if (tab === "passes") {
      p.appendChild(passesPanel(report, (sel) => { select(sel); setTab("compiled"); }));
    } else p.appendChild(statsPanel(report));
    return p;
  };

  /** The graph of a tab (and the Compiled tab's code panel and fusion table) in its holder. */
  const fillGraph = (tab, holder) => {
    holder.textContent = "";
    const gv = graphFor(tab);
    holder.appendChild(gv.el);
    if (tab === "compiled" && codeHolder) holder.appendChild(codeHolder);
    if (tab === "compiled") holder.appendChild(fusionTable(report, select, pgs[graphOfTab(tab)]));
  };
  /** With --grad: which program's kernels the Compiled tab draws. */
  const stepSwitch = () => {
    const opts2 = [[true, "train step (forward and backward)"], [false, "forward (the loss alone)"]];
    const bar = h("div", { class: "nbc-switch", role: "radiogroup", "aria-label": "kernels of", "data-testid": "nbc-step-switch" }, "kernels of: ");
    const buttons = opts2.map(([step, label]) => {
      const b = h("button", { class: "nbc-btn", type: "button", role: "radio", "aria-checked": String(state.step === step),
        "data-testid": step ? "nbc-show-step" : "nbc-show-forward" }, label);
      b.addEventListener("click", () => {
        if (state.step === step) return;
        state.step = step;
        buttons.forEach((x, i) => x.setAttribute("aria-checked", String(opts2[i][0] === step)));
        const holder = panels.get("compiled").querySelector(".nbc-graph-holder");
        fillGraph("compiled", holder);
        const gv = graphs.get(gkey("compiled"));
        if (!gv.boxes) gv.render(); else gv.updateStatus();
        applySelection();
        runSearch();
      });
      return b;
    });
    bar.append(...buttons);
    return bar;
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
    const gv = graphs.get(gkey(tab));
    if (gv && !gv.boxes) gv.render();
    else if (gv) { if (!gv.fitted) gv.firstView(); gv.render(); }
    if (!gv) status.textContent = "";
    for (const b of graphButtons) b.hidden = !gv; // zoom, fit and export only where a graph is drawn
    applySelection();
    runSearch();
    if (!silent) opts.onTab?.(tab);
  };

  const runSearch = () => {
    const q = state.query;
    const gv = graphs.get(gkey(state.tab));
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
  search.addEventListener("keydown", (ev) => { if (ev.key === "Enter") { ev.preventDefault(); graphs.get(gkey(state.tab))?.nextMatch(); } });

  function resolve(sel) {
    const names = ["traced", "compiled", "gradient", "gradient_compiled"];
    const out = { hl: Object.fromEntries(names.map((k) => [k, new Set()])),
      sel: Object.fromEntries(names.map((k) => [k, new Set()])), lines: new Set(), info: { type: "none" } };
    const addFusion = (fid) => {
      const f = traced.fusionById.get(fid);
      if (!f) return;
      (f.nodes || []).forEach((id) => out.hl.compiled.add(id));
      for (const name of ["traced", "compiled", "gradient"]) (pgs[name]?.fusionNodes.get(fid) || []).forEach((id) => out.hl[name].add(id));
      (f.lines || []).forEach((l) => out.lines.add(String(l)));
      (f.locations || []).forEach((l) => out.lines.add(l.label));
    };
    const [kind, ...rest] = sel.split(":");
    const id = rest.join(":");
    if (kind in pgs && id) {
      const n = pgs[kind]?.byId.get(id);
      if (n) {
        out.sel[kind].add(id);
        if (n.line != null) out.lines.add(String(n.line));
        else if (n.loc) out.lines.add(n.loc);
        if (n.fusion && kind !== "gradient_compiled") addFusion(n.fusion);
        else if (n.fusion) (pgs[kind].fusionById.get(n.fusion)?.lines || []).forEach((l) => out.lines.add(String(l)));
        out.info = { type: "node", graph: kind, id };
      }
    } else if (kind === "fusion") { addFusion(id); out.info = { type: "fusion", id }; }
    else if (kind === "line") {
      const e = report.lines?.[id];
      (e?.nodes || []).forEach((x) => out.hl.traced.add(x));
      (e?.fusions || []).forEach(addFusion);
      for (const name of ["traced", "compiled", "gradient", "gradient_compiled"]) {
        if (name === "gradient_compiled" && !graphs.has("compiled-step")) continue;
        for (const n of pgs[name]?.nodes || []) if (String(n.line) === id || n.loc === id) out.hl[name].add(n.id);
      }
      out.lines = new Set([id]);
      out.info = { type: "line", line: id };
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
        const on = r.lines.has(row.getAttribute("data-line"));
        row.classList.toggle("nbc-hl", on);
        row.setAttribute("data-highlighted", String(on));
      }
    }
    details.textContent = "";
    details.appendChild(detailsFor(report, r.info, { pgs, select }));
    // the details panel only once something is selected: until then the drawing has the width
    details.hidden = r.info.type === "none";
    if (codeHolder) showCode(r.info);
  }

  /** The Compiled tab's code panel: the code of the selected kernel (a fusion or its node). */
  function showCode(info) {
    let name = null;
    if (info.type === "fusion") name = traced.fusionById.get(info.id)?.name || info.id;
    else if (info.type === "node" && info.graph === "compiled") {
      const n = pgs.compiled?.byId.get(info.id);
      // a fusion, or another kernel the report has code for (not a parameter or the output)
      name = n?.fusion ? traced.fusionById.get(n.fusion)?.name || n.fusion : kernelCodeOf(report, n?.label)?.name || null;
    }
    if (name === codeShown) return;
    codeShown = name;
    codeHolder.textContent = "";
    if (name) codeHolder.appendChild(kernelCodePanel(report, name));
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
  const graphButtons = [];
  const btn = (label, testid, title, fn) => {
    const b = h("button", { class: "nbc-btn", type: "button", "data-testid": testid, title, "aria-label": title }, label);
    b.addEventListener("click", () => { const gv = graphs.get(gkey(state.tab)); if (gv) fn(gv); });
    graphButtons.push(b);
    return b;
  };
  const doc = el.ownerDocument;
  const fileBase = () => `${report.name || "nbcompile"}-${state.tab}`.replace(/[^A-Za-z0-9_.-]+/g, "_");
  const flopsFrom = fromOf(s, "flops");
  const header = h("div", { class: "nbc-header" },
    h("span", { class: "nbc-title" }, `nbcompile · ${report.name} · ${report.backend}`),
    chip(`${fmtNum(s.eager_kernels)} → ${fmtNum(s.kernels)} kernels`, "ops run op by op (eager) → kernels after XLA"),
    chip(`${fmtNum(s.fusions)} fusions`), chip(`${fmtNum(s.flops)} flops${flopsFrom ? ` (${flopsFrom})` : ""}`, "floating-point operations of one call"),
    chip(`compile ${fmtSeconds(s.compile_seconds)} (measured)`));
  const toolbar = h("div", { class: "nbc-toolbar" }, tabBar, h("span", { class: "nbc-spacer" }), search, count,
    btn("⊕", "nbc-expand-level", "open one level", (gv) => gv.expandLevel()),
    btn("⊞", "nbc-expand-all", "expand groups (within the node budget)", (gv) => gv.expandAll()),
    btn("⊟", "nbc-collapse-all", "collapse all groups", (gv) => gv.collapseAll()),
    btn("+", "nbc-zoom-in", "zoom in", (gv) => gv.zoom(1.25)), btn("−", "nbc-zoom-out", "zoom out", (gv) => gv.zoom(0.8)),
    btn("⤢", "nbc-fit", "fit to view: the whole graph, or its width where labels would be under 8 px (then scroll)", (gv) => gv.fit()),
    btn("SVG", "nbc-export-svg", "download this graph as SVG", (gv) => download(doc, fileBase() + ".svg", new Blob([gv.exportSvg()], { type: "image/svg+xml" }))),
    btn("PNG", "nbc-export-png", "download this graph as PNG", (gv) => gv.exportPng().then((blob) => download(doc, fileBase() + ".png", blob))));
  const notes = (report.notes || []).length ? h("ul", { class: "nbc-notes", "data-testid": "nbc-notes" }, report.notes.map((n) => h("li", null, n))) : null;
  el.append(header, changesCard(report, () => setTab("diff")) || "", notes || "", toolbar,
    h("div", { class: "nbc-body" }, h("div", { class: "nbc-left" }, status, body), details));
  setTab(has[opts.tab] ? opts.tab : "graph", { silent: true });
  view.select = (sel) => { if ((sel || "") !== state.selected) select(sel, { silent: true }); };
  view.setTab = (tab) => setTab(tab, { silent: true });
  view.report = report;
  view.graphs = graphs;
}

/** The "what changed" card of a re-run cell; links to the Diff tab when the report has one. */
function changesCard(report, openDiff) {
  const c = report.extras?.changes;
  if (!c) return null;
  const items = c.items || String(c.text || "").split("\n").filter(Boolean);
  const card = h("div", { class: "nbc-changes", "data-testid": "nbc-changes" },
    h("div", { class: "nbc-changes-head" }, items[0] || "what changed"), h("ul", null, items.slice(1).map((t) => h("li", null, t))));
  if (c.diff) {
    const link = h("span", { class: "nbc-link", "data-testid": "nbc-open-diff" }, "see the diff: kernels added, removed and changed →");
    activatable(link, openDiff);
    card.appendChild(link);
  }
  return card;
}

function chip(text, title) {
  return h("span", { class: "nbc-hchip", title }, text);
}
