// The diff view (c_new.diff(c_old), nbcompile.compare(a, b)): the two compiled graphs side by
// side with kernels added / removed / changed coloured, per-kernel and per-line deltas (flops,
// bytes; time and memory when both sides were measured) and the changed cell lines.
// The report is schema nbcompile.diff/1 (docs/report-schema.md, built by nbcompile/report/diffview.py).

import { GraphView } from "./graphview.js";
import { prepareGraph } from "./model.js";
import { fmtBytes, fmtNum, fmtSeconds, h, table, trunc } from "./util.js";

const STATUS_LABEL = { added: "added", removed: "removed", changed: "changed", same: "unchanged" };

function delta(pair, fmt) {
  if (!pair) return "–";
  const [b, a] = pair;
  if (b == null && a == null) return "–";
  if (b == null || a == null) return `${b == null ? "–" : fmt(b)} → ${a == null ? "–" : fmt(a)}`;
  const d = a - b;
  const sign = d > 0 ? "+" : d < 0 ? "−" : "±";
  return `${b == null ? "–" : fmt(b)} → ${a == null ? "–" : fmt(a)} (${sign}${fmt(Math.abs(d))})`;
}

function side(d, which, status) {
  const s = d[which];
  const graph = s.report?.graphs?.compiled;
  const box = h("div", { class: "nbc-diff-side", "data-testid": `nbc-diff-${which}` },
    h("div", { class: "nbc-diff-label" }, `${which}: ${s.name}${s.label && s.label !== which ? ` (${s.label})` : ""}`));
  if (!graph) { box.appendChild(h("div", { class: "nbc-hint" }, "no compiled program on this side")); return [box, null]; }
  const pg = prepareGraph(graph, s.report);
  const gv = new GraphView(pg, { name: `diff-${which}`, status });
  box.appendChild(gv.el);
  return [box, gv];
}

export function renderDiff(el, d, view) {
  el.classList.add("nbc-root", "nbc-diff");
  const st = { before: new Map(), after: new Map() };
  for (const k of d.kernels || []) {
    if (k.before?.id) st.before.set(k.before.id, k.status);
    if (k.after?.id) st.after.set(k.after.id, k.status);
  }
  const counts = { added: 0, removed: 0, changed: 0, same: 0 };
  for (const k of d.kernels || []) counts[k.status]++;
  const from = d.from || {};
  const chips = (d.summary || []).map((r) => h("span", { class: "nbc-hchip" },
    `${r.figure}: ${delta([r.before, r.after], /bytes/.test(r.figure) ? fmtBytes : /seconds|time/.test(r.figure) ? fmtSeconds : fmtNum)}${r.from ? ` (${r.from})` : ""}`));
  const [left, gvB] = side(d, "before", st.before);
  const [right, gvA] = side(d, "after", st.after);
  const fit = h("button", { class: "nbc-btn", type: "button", "data-testid": "nbc-diff-fit", title: "fit both graphs" }, "⤢ fit");
  fit.addEventListener("click", () => { gvB?.fit(); gvA?.fit(); });
  const kernels = [...(d.kernels || [])].sort((a, b) => order(a) - order(b));
  const krows = kernels.slice(0, 200).map((k) => [h("span", { class: `nbc-dtag nbc-d-${k.status}` }, STATUS_LABEL[k.status]),
    k.before?.name || "–", k.after?.name || "–", trunc((k.ops || []).join("+"), 40), trunc((k.lines || []).join(" | "), 50),
    delta([k.before?.flops, k.after?.flops], fmtNum), delta([k.before?.bytes, k.after?.bytes], fmtBytes),
    k.before?.seconds != null || k.after?.seconds != null ? delta([k.before?.seconds, k.after?.seconds], fmtSeconds) : "–"]);
  const lrows = (d.lines || []).filter((l) => l.change !== "same" || l.flops?.[0] !== l.flops?.[1]).slice(0, 200).map((l) =>
    [h("span", { class: `nbc-dtag nbc-d-${l.change === "edited" ? "changed" : l.change}` }, l.change), l.where || "", h("code", null, trunc(l.text, 60)),
      delta(l.flops, fmtNum), delta(l.bytes, fmtBytes), l.seconds ? delta(l.seconds, fmtSeconds) : "–", l.peak_bytes ? delta(l.peak_bytes, fmtBytes) : "–"]);
  const hunks = (d.source_diff || []).map((hk) => h("div", { class: "nbc-hunk" },
    hk.label ? h("div", { class: "nbc-hunk-label" }, hk.label) : null,
    ...hk.before.map((t, i) => h("div", { class: "nbc-hunk-del" }, `- ${hk.before_start + i}  ${t}`)),
    ...hk.after.map((t, i) => h("div", { class: "nbc-hunk-add" }, `+ ${hk.after_start + i}  ${t}`))));
  el.append(
    h("div", { class: "nbc-header" }, h("span", { class: "nbc-title" }, `nbcompile diff · ${d.after.label || d.after.name} vs ${d.before.label || d.before.name}`), chips),
    h("div", { class: "nbc-legend", "data-testid": "nbc-diff-legend" },
      ...["added", "removed", "changed", "same"].map((k) => h("span", { class: "nbc-legend-item" }, h("span", { class: `nbc-swatch nbc-d-${k}` }), `${STATUS_LABEL[k]} ${counts[k]}`)), fit),
    h("div", { class: "nbc-diff-sides" }, left, right),
    h("h4", null, "Changed cell lines"),
    hunks.length ? h("div", { class: "nbc-hunks", "data-testid": "nbc-diff-source" }, hunks) : h("div", { class: "nbc-hint", "data-testid": "nbc-diff-source" }, "no line of the compiling cell changed"),
    h("h4", null, `Kernels (${kernels.length})`),
    table(["", "before", "after", "ops", "lines", `flops (${from.flops || "?"})`, `bytes (${from.bytes || "?"})`, `time (${from.seconds || "not profiled"})`], krows, "nbc-diff-kernels"),
    h("h4", null, "Per line"),
    table(["", "line", "source", `flops (${from.line_flops || "estimate"})`, `bytes (${from.line_bytes || "estimate"})`, `time (${from.seconds || "not profiled"})`,
      `bytes at peak (${from.peak_bytes || "no memory map"})`], lrows, "nbc-diff-lines"),
    ...(d.notes || []).map((n) => h("div", { class: "nbc-hint" }, n)));
  // both graphs are drawn once the element is in the page (they need its width to fit)
  requestAnimationFrame(() => { gvB?.render(); gvA?.render(); });
  view.graphs = new Map([["before", gvB], ["after", gvA]]);
  view.report = d;
}

function order(k) {
  return { added: 0, removed: 1, changed: 2, same: 3 }[k.status] ?? 4;
}
