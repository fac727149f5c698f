// The non-graph parts of the view: Source lines, Stats and Gradient tables, the details panel.

import { activatable, fmtBytes, fmtNum, fmtPct, fmtSeconds, h, kvTable, table, trunc } from "./util.js";

/** Source tab: each cell line with its cost share and the kernels it became (like cython -a). */
export function sourcePanel(report, select) {
  const lines = report.source?.lines || [];
  const info = report.lines || {};
  const fusionById = new Map((report.fusions || []).map((f) => [f.id, f]));
  const rows = lines.map((text, i) => {
    const n = i + 1;
    const e = info[String(n)];
    const share = e?.cost_share || 0;
    const chips = (e?.fusions || []).slice(0, 4).map((fid) => {
      const chip = h("span", { class: "nbc-chip", "data-fusion": fid, title: chipTitle(fusionById.get(fid)) }, fid);
      activatable(chip, (ev) => { ev.stopPropagation(); select("fusion:" + fid); });
      return chip;
    });
    const more = (e?.fusions?.length || 0) - chips.length;
    const row = h("div", { class: "nbc-line" + (e ? " nbc-has" : ""), "data-testid": `nbc-line-${n}`, "data-line": n,
      "aria-label": `line ${n}` },
      h("span", { class: "nbc-lno" }, String(n)),
      h("span", { class: "nbc-share", title: "share of the program's flops" }, e ? fmtPct(share) : ""),
      h("code", { class: "nbc-code" }, text || " "),
      h("span", { class: "nbc-ann" }, e?.nodes?.length ? `${e.nodes.length} ops → ${e.fusions?.length || 0} kernels ` : "",
        chips, more > 0 ? h("span", { class: "nbc-more" }, `+${more}`) : null));
    if (share > 0) row.style.setProperty("--nbc-share", String(Math.min(1, 0.12 + share * 1.5)));
    activatable(row, () => select("line:" + n));
    return row;
  });
  return h("div", { class: "nbc-source", "data-testid": "nbc-source" },
    h("div", { class: "nbc-hint" }, "Each line: its share of the program's flops and the XLA kernels it became. Click a line to highlight its ops."),
    rows);
}

function chipTitle(f) {
  if (!f) return "";
  return `${f.kind} fusion: ${(f.ops || []).join(", ")} · ${fmtNum(f.flops)} flops · ${fmtBytes(f.bytes)}`;
}

const SUMMARY_LABELS = {
  jaxpr_eqns: "jaxpr equations (traced ops)", stablehlo_ops: "StableHLO ops", hlo_ops_before: "HLO ops before optimisation",
  hlo_ops_after: "HLO ops after optimisation", kernels: "kernels that run (compiled)", eager_kernels: "kernels op by op (eager)",
  fusions: "fusions", folded_constants: "folded constants", flops: "flops", bytes_accessed: "bytes accessed",
  compile_seconds: "compile time",
};

function fmtValue(key, v) {
  if (v === null || v === undefined) return "–";
  if (typeof v !== "number") return typeof v === "object" ? JSON.stringify(v) : String(v);
  if (/seconds|^(trace|lower|compile|analyse|freeze)$|_s$/.test(key)) return fmtSeconds(v);
  if (/bytes/.test(key)) return fmtBytes(v);
  return fmtNum(v);
}

function kvOf(obj, labels = {}, testid) {
  return kvTable(Object.entries(obj || {}).map(([k, v]) => [labels[k] || k.replaceAll("_", " "), fmtValue(k, v)]), testid);
}

/** Stats tab: op counts, cost, memory, timings, folded constants, notes, extras (bench/ablate). */
export function statsPanel(report) {
  const parts = [h("h4", null, "Op counts and headline figures"), kvOf(report.summary, SUMMARY_LABELS, "nbc-stats-summary")];
  if (report.cost) parts.push(h("h4", null, "Cost (XLA)"), kvOf(report.cost));
  if (report.memory) parts.push(h("h4", null, "Memory"), kvOf(report.memory));
  if (report.timings) parts.push(h("h4", null, "Time"), kvOf(report.timings));
  const folded = report.folded || [];
  parts.push(h("h4", null, `Folded constants (${folded.length})`));
  if (folded.length) {
    parts.push(table(["what", "stage", "shape", "bytes", "line", "hint"],
      folded.map((f) => [f.what, f.stage, f.shape || "–", fmtBytes(f.bytes), f.line ?? "–", f.hint || ""]), "nbc-folded"));
  }
  for (const [key, value] of Object.entries(report.extras || {})) parts.push(h("h4", null, key), genericBlock(value, key));
  return h("div", { class: "nbc-stats", "data-testid": "nbc-stats" }, parts);
}

/** Render any JSON value as tables: list of records -> table, record -> key/value, else text. */
function genericBlock(value, testid) {
  if (Array.isArray(value) && value.length && value.every((r) => r && typeof r === "object" && !Array.isArray(r))) {
    const cols = [...new Set(value.flatMap((r) => Object.keys(r)))];
    return table(cols, value.map((r) => cols.map((c) => fmtValue(c, r[c]))), `nbc-extra-${testid}`);
  }
  if (value && typeof value === "object" && !Array.isArray(value)) {
    return kvTable(Object.entries(value).map(([k, v]) => [k, v && typeof v === "object" ? genericBlock(v, `${testid}-${k}`) : fmtValue(k, v)]),
      `nbc-extra-${testid}`);
  }
  return h("div", { "data-testid": `nbc-extra-${testid}` }, fmtValue(testid, value));
}

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
      ["residual bytes", fmtBytes(g.residual_bytes)]], "nbc-gradient-summary"),
    h("details", { class: "nbc-residuals" },
      h("summary", null, `Residuals: ${res.length} values kept for the backward pass (${fmtBytes(g.residual_bytes)})`),
      table(["shape", "bytes", "line", "primitive"], shown.map((r) => [r.shape, fmtBytes(r.bytes), r.line ?? "–", r.primitive || "–"]), "nbc-residuals"),
      res.length > shown.length ? h("div", null, `… ${res.length - shown.length} more`) : null));
}

/** Fusion table under the compiled graph (largest first; the first 100 until asked). */
export function fusionTable(report, select) {
  const fusions = [...(report.fusions || [])].sort((a, b) => (b.flops || 0) - (a.flops || 0));
  const wrap = h("div", { class: "nbc-fusions", "data-testid": "nbc-fusion-table" });
  const draw = (limit) => {
    wrap.textContent = "";
    wrap.appendChild(h("h4", null, `Fusions (${fusions.length}), largest first`));
    const rows = fusions.slice(0, limit).map((f) => {
      const name = h("span", { class: "nbc-link" }, f.name || f.id);
      activatable(name, () => select("fusion:" + f.id));
      return [name, f.kind, trunc((f.ops || []).join(", "), 60), fmtNum(f.flops), fmtBytes(f.bytes), fmtBytes(f.bytes_saved),
        (f.lines || []).join(", ") || "–", f.phase || "–"];
    });
    wrap.appendChild(table(["fusion", "kind", "ops", "flops", "bytes", "bytes saved", "lines", "phase"], rows));
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
  if (sel.type === "node") {
    const pg = pgs[sel.graph];
    const n = pg?.byId.get(sel.id);
    if (!n) return h("div", null, "No such node: " + sel.id);
    const f = n.fusion ? pg.fusionById.get(n.fusion) : null;
    const labels = (pg.inLabels.get(n.id) || []).map((id) => pg.byId.get(id)).map((p) => `${p.label || p.id}: ${p.shape}`);
    const nb = (ids) => (ids || []).slice(0, 6).map((id) => link(pg.byId.get(id)?.label || pg.byId.get(id)?.op || id, `${sel.graph}:${id}`));
    const rows = [["op", n.op], ["name", n.label], ["kind", n.kind], ["shape", n.shape], ["bytes", fmtBytes(n.bytes)], ["flops", fmtNum(n.flops)],
      lineRow(n.line), n.file ? ["source", `${n.file}:${n.file_line ?? "?"}`] : null, ["module path", n.path || "–"],
      ["fusion", f ? link(f.name || f.id, "fusion:" + f.id) : n.fusion || "–"], n.phase ? ["phase", n.phase] : null,
      n.value ? ["value (--debug)", valueSummary(n.value)] : null,
      labels.length ? ["inputs (labels)", h("div", null, labels.slice(0, 12).map((t) => h("div", null, t)))] : null,
      ["producers", h("span", null, nb(pg.preds.get(n.id)))], ["consumers", h("span", null, nb(pg.succs.get(n.id)))]];
    return h("div", null, h("h4", null, `${sel.graph} node ${n.id}`), kvTable(rows, "nbc-details-node"), f ? fusionBlock(f, lineRow) : null);
  }
  if (sel.type === "fusion") {
    const f = (report.fusions || []).find((x) => x.id === sel.id);
    return f ? fusionBlock(f, lineRow) : h("div", null, "No such fusion: " + sel.id);
  }
  if (sel.type === "line") {
    const e = report.lines?.[String(sel.line)];
    const fs = (e?.fusions || []).map((fid) => link(fid, "fusion:" + fid));
    return h("div", null, h("h4", null, `Line ${sel.line}`), h("pre", { class: "nbc-pre" }, report.source?.lines?.[sel.line - 1] || ""),
      kvTable([["traced ops", fmtNum(e?.nodes?.length || 0)], ["cost share", fmtPct(e?.cost_share ?? null)],
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

function fusionBlock(f, lineRow) {
  return h("div", { class: "nbc-fusion-details" },
    h("h4", null, `Fusion ${f.name || f.id} (${f.kind})`),
    h("div", { class: "nbc-ops", "data-testid": "nbc-fusion-ops" }, (f.ops || []).map((op) => h("span", { class: "nbc-chip" }, op))),
    kvTable([["flops", fmtNum(f.flops)], ["bytes", fmtBytes(f.bytes)], ["bytes saved", fmtBytes(f.bytes_saved)],
      ...(f.lines || []).slice(0, 6).map(lineRow), ["modules", (f.modules || []).join(", ") || "–"], f.phase ? ["phase", f.phase] : null],
    "nbc-details-fusion"));
}
