// The non-graph parts of the view: the Gradient header, the fusion table, the details panel.
// (Source tab: source.js; Stats tab: stats.js; diff view: diff.js.)

import { sourcesOf } from "./source.js";
import { fromOf } from "./stats.js";
import { activatable, fmtBytes, fmtNum, fmtPct, h, kvTable, table, trunc } from "./util.js";

/** The text of a line by its key in report.lines ("4", or "In [3] line 7"). */
export function lineText(report, key) {
  for (const { prefix, lines } of sourcesOf(report)) {
    if (!String(key).startsWith(prefix)) continue;
    const n = Number(String(key).slice(prefix.length));
    if (Number.isInteger(n) && n >= 1 && n <= lines.length) return lines[n - 1];
  }
  return "";
}

const withFrom = (text, from) => (from ? `${text} (${from})` : text);

/** Gradient tab header: counts by phase and the residuals kept for the backward pass. */
export function gradientPanel(report) {
  const g = report.gradient;
  const res = [...(g.residuals || [])].sort((a, b) => (b.bytes || 0) - (a.bytes || 0));
  const shown = res.slice(0, 200);
  return h("div", { class: "nbc-gradient", "data-testid": "nbc-gradient" },
    h("div", { class: "nbc-legend" }, h("span", { class: "nbc-swatch nbc-p-forward" }), "forward ",
      h("span", { class: "nbc-swatch nbc-p-backward" }), "backward ", h("span", { class: "nbc-swatch nbc-p-mixed" }), "mixed"),
    kvTable([["argnums", (g.argnums || []).join(", ")], ["forward ops", fmtNum(g.forward_ops)], ["backward ops", fmtNum(g.backward_ops)],
      ["kernels", Object.entries(g.kernels || {}).map(([k, v]) => `${k} ${v}`).join(" · ")], ["mixed kernels", fmtNum(g.mixed_kernels)],
      ["residual bytes", withFrom(fmtBytes(g.residual_bytes), fromOf(g, "residual_bytes"))]], "nbc-gradient-summary"),
    h("details", { class: "nbc-residuals" },
      h("summary", null, `Residuals: ${res.length} values kept for the backward pass (${fmtBytes(g.residual_bytes)})`),
      table(["shape", "bytes", "line", "primitive"], shown.map((r) => [r.shape, fmtBytes(r.bytes), r.line ?? "–", r.primitive || "–"]), "nbc-residuals"),
      res.length > shown.length ? h("div", null, `… ${res.length - shown.length} more`) : null));
}

/** Fusion table under the compiled graph (largest first; the first 100 until asked). */
/** The user's call or module a kernel came from: its first call path, else its first module
 * path, with how many more (report/fallback.py: fusion_where). */
export function fusionWhere(f) {
  const paths = (f.functions || []).length ? f.functions : f.modules || [];
  return paths.length ? String(paths[0]) + (paths.length > 1 ? ` +${paths.length - 1}` : "") : "–";
}

export function fusionTable(report, select, pg = null) {
  // pg: the drawn compiled graph (the train step's with --grad): its fusions, rows select its nodes
  const step = pg && pg.graph === report.graphs?.gradient_compiled;
  const fusions = [...((step ? report.gradient_fusions : report.fusions) || [])].sort((a, b) => (b.flops || 0) - (a.flops || 0));
  const target = (f) => (step ? `gradient_compiled:${(pg.fusionNodes.get(f.id) || [])[0] || ""}` : "fusion:" + f.id);
  const wrap = h("div", { class: "nbc-fusions", "data-testid": "nbc-fusion-table" });
  const draw = (limit) => {
    wrap.textContent = "";
    wrap.appendChild(h("h4", null, `Fusions (${fusions.length})${step ? " of the train step" : ""}, largest first`));
    const rows = fusions.slice(0, limit).map((f) => {
      const name = h("span", { class: "nbc-link" }, f.name || f.id);
      activatable(name, () => select(target(f)));
      const where = (f.lines || []).join(", ") || (f.locations || []).map((l) => l.label).slice(0, 2).join(", ") || "–";
      return [name, fusionWhere(f), f.kind, trunc((f.ops || []).join(", "), 60), fmtNum(f.flops), fmtBytes(f.bytes), fmtBytes(f.bytes_saved),
        where, f.phase || "–"];
    });
    const from = fusions[0] ? ` (${fromOf(fusions[0], "flops") || "?"})` : "";
    wrap.appendChild(table(["fusion", "call / module", "kind", "ops", `flops${from}`, `bytes${from}`, "bytes saved (estimate)", "lines", "phase"], rows));
    if (fusions.length > limit) {
      const more = h("button", { class: "nbc-btn", type: "button" }, `show all ${fusions.length}`);
      more.addEventListener("click", () => draw(fusions.length));
      wrap.appendChild(more);
    }
  };
  draw(100);
  return wrap;
}

/** One --debug value summary: range, mean, NaN/Inf counts, a tiny histogram. */
function valueSummary(v) {
  const num = (x) => (x == null ? "–" : Number(x).toPrecision(4));
  const bad = (v.nan || v.inf) ? ` · ${v.nan || 0} NaN · ${v.inf || 0} Inf` : "";
  const hist = Array.isArray(v.hist?.counts) ? v.hist.counts : null;
  const peak = hist ? Math.max(1, ...hist) : 1;
  const bars = hist ? h("span", { class: "nbc-hist", title: "histogram" },
    hist.map((c) => h("span", { style: `display:inline-block;width:4px;margin-right:1px;background:currentColor;height:${2 + Math.round(10 * c / peak)}px` }))) : null;
  return h("div", { "data-testid": "nbc-value", class: v.first_nan ? "nbc-first-nan" : null },
    h("div", null, `min ${num(v.min)} · max ${num(v.max)} · mean ${num(v.mean)}${bad}`),
    v.first_nan ? h("div", null, "← first NaN of the program") : null, bars);
}

/** Details panel contents for a resolved selection. */
export function detailsFor(report, sel, ctx) {
  const { pgs, select } = ctx;
  const link = (text, target) => {
    const a = h("span", { class: "nbc-link" }, text);
    activatable(a, () => select(target));
    return a;
  };
  const lineRow = (n) => (n == null ? null : ["line", h("span", null, link(`L${n}`, "line:" + n), " ", h("code", null, trunc(report.source?.lines?.[n - 1] || "", 60)))]);
  const locRow = (loc) => ["line", h("span", null, link(loc.label, "line:" + loc.label), " ", h("code", null, trunc(lineText(report, loc.label), 60)))];
  if (sel.type === "node") {
    const pg = pgs[sel.graph];
    const n = pg?.byId.get(sel.id);
    if (!n) return h("div", null, "No such node: " + sel.id);
    const f = n.fusion ? pg.fusionById.get(n.fusion) : null;
    const labels = (pg.inLabels.get(n.id) || []).map((id) => pg.byId.get(id)).map((p) => `${p.label || p.id}: ${p.shape}`);
    const nb = (ids) => (ids || []).slice(0, 6).map((id) => link(pg.byId.get(id)?.label || pg.byId.get(id)?.op || id, `${sel.graph}:${id}`));
    const gsrc = pg.graph;
    const rows = [["op", n.op], ["name", n.label], ["kind", n.kind], ["shape", n.shape],
      ["bytes", withFrom(fmtBytes(n.bytes), fromOf(n, "bytes") || fromOf(gsrc, "bytes"))],
      ["flops", withFrom(fmtNum(n.flops), n.flops == null ? null : fromOf(n, "flops") || fromOf(gsrc, "flops"))],
      n.line != null ? lineRow(n.line) : n.loc ? locRow({ label: n.loc }) : null, n.detail ? ["library frame", n.detail] : null,
      n.file ? ["source", `${n.file}:${n.file_line ?? "?"}`] : null, ["module path", n.path || "–"],
      ["fusion", f ? link(f.name || f.id, "fusion:" + f.id) : n.fusion || "–"], n.phase ? ["phase", n.phase] : null,
      n.value ? ["value (--debug)", valueSummary(n.value)] : null,
      labels.length ? ["inputs (labels)", h("div", null, labels.slice(0, 12).map((t) => h("div", null, t)))] : null,
      ["producers", h("span", null, nb(pg.preds.get(n.id)))], ["consumers", h("span", null, nb(pg.succs.get(n.id)))]];
    return h("div", null, h("h4", null, `${sel.graph} node ${n.id}`), kvTable(rows, "nbc-details-node"), f ? fusionBlock(f, lineRow, locRow) : null);
  }
  if (sel.type === "fusion") {
    const f = (report.fusions || []).find((x) => x.id === sel.id);
    return f ? fusionBlock(f, lineRow, locRow) : h("div", null, "No such fusion: " + sel.id);
  }
  if (sel.type === "line") {
    const e = report.lines?.[String(sel.line)];
    const fs = (e?.fusions || []).map((fid) => link(fid, "fusion:" + fid));
    const title = /^\d+$/.test(String(sel.line)) ? `Line ${sel.line}` : String(sel.line);
    return h("div", null, h("h4", null, title), h("pre", { class: "nbc-pre" }, lineText(report, sel.line)),
      kvTable([["traced ops", fmtNum(e?.nodes?.length || 0)], ["cost share", withFrom(fmtPct(e?.cost_share ?? null), e ? fromOf(e, "cost_share") : null)],
        ["kernels", h("span", { class: "nbc-chips" }, fs.length ? fs : "–")]], "nbc-details-line"));
  }
  if (sel.type === "group") {
    const g = pgs[sel.graph]?.groups.get(sel.id);
    if (!g) return h("div", null, "");
    const ops = [...g.ops.entries()].sort((a, b) => b[1] - a[1]).slice(0, 10).map(([op, k]) => `${op} ×${k}`).join(", ");
    return h("div", null, h("h4", null, `Group ${g.label}`), kvTable([["kind", g.kind], ["ops inside", fmtNum(g.count)], ["flops", fmtNum(g.flops)],
      ["bytes (outputs)", fmtBytes(g.bytes)], ["lines", g.lineMin <= g.lineMax ? `${g.lineMin}–${g.lineMax}` : "–"], ["most frequent", ops]], "nbc-details-group"));
  }
  return h("div", { class: "nbc-hint" }, "Click a box, a line or a fusion to see its details. Hover a box to see its producers (in) and consumers (out).");
}

function fusionBlock(f, lineRow, locRow) {
  const where = (f.lines || []).length ? f.lines.slice(0, 6).map(lineRow) : (f.locations || []).slice(0, 6).map(locRow);
  return h("div", { class: "nbc-fusion-details" },
    h("h4", null, `Fusion ${f.name || f.id} (${f.kind})`),
    h("div", { class: "nbc-ops", "data-testid": "nbc-fusion-ops" }, (f.ops || []).map((op) => h("span", { class: "nbc-chip" }, op))),
    kvTable([["flops", withFrom(fmtNum(f.flops), fromOf(f, "flops"))], ["bytes", withFrom(fmtBytes(f.bytes), fromOf(f, "bytes"))],
      ["bytes saved", withFrom(fmtBytes(f.bytes_saved), fromOf(f, "bytes_saved"))],
      ...where, ["modules", (f.modules || []).join(", ") || "–"], f.phase ? ["phase", f.phase] : null],
    "nbc-details-fusion"));
}
