// The Stats tab as pictures: the op-count funnel, kernel cost bars, the profile's roofline and
// top kernels, the memory timeline, the peak's buffers by line and module, the fits verdict;
// raw XLA figures (each explained in one line) and other results in collapsible sections.

import { barChart, figure, funnel, KIND_COLOURS, legend, roofline, stackedArea } from "./charts.js";
import { fmtBytes, fmtNum, fmtPct, fmtSeconds, h, kvTable, table, trunc } from "./util.js";

/** Where a figure comes from: the nearest `from` label (docs/report-schema.md). */
export function fromOf(obj, key) {
  const f = obj?.from;
  if (!f) return null;
  if (typeof f === "string") return f;
  return f[key] ?? f["*"] ?? null;
}

/** The program's op count, the same in every tab: its primitive ops, nested calls opened
 * (`summary.traced_ops`; a report made before it had only the equation count). */
export const opCount = (s) => s?.traced_ops ?? s?.jaxpr_eqns;

/** The user's module and call a kernel came from (`Transformer/blocks_3 · gelu#4`,
 * `mlp#1/layer#3`): its first module path and first call path, with how many more
 * (report/statsfig.py: fusion_where). */
export function fusionWhere(f) {
  const fns = f.functions || [], mods = f.modules || [];
  const first = [mods[0], fns[0]].filter(Boolean).join(" · ");
  const more = Math.max(fns.length, mods.length) - 1;
  return first ? first + (more > 0 ? ` +${more}` : "") : "–";
}

/** A {value, source} figure (profile / memory JSON) or a plain number. */
export const val = (x) => (x && typeof x === "object" && "value" in x ? x.value : x);
export const src = (x, dflt) => (x && typeof x === "object" && "source" in x ? x.source : dflt) || "unknown";

const RAW_HELP = [
  [/^flops$/, "floating-point operations of one call, counted by XLA's cost model"],
  [/^bytes_accessed$/, "bytes all kernels read and write in one call (cost model, not a measurement)"],
  [/^transcendentals$/, "exp / log / tanh-like operations of one call"],
  [/^optimal_seconds$/, "XLA's estimate of the fastest possible call (TPU cost model)"],
  [/^utilization_operand(\d+)$/, "how many times each element of operand $1 is read (cost model)"],
  [/^bytes_accessed_operand(\d+)$/, "bytes read from operand $1"],
  [/^bytes_accessed_output$/, "bytes written to the outputs"],
  [/^argument_bytes$/, "memory of the arguments"],
  [/^output_bytes$/, "memory of the outputs"],
  [/^temp_bytes$/, "scratch memory XLA allocates for intermediate values"],
  [/^alias_bytes$/, "outputs that reuse (alias) argument buffers"],
  [/^generated_code_bytes$/, "size of the compiled machine code"],
  [/^host_temp_bytes$/, "scratch memory on the host"],
  [/^peak_bytes$/, "most memory live at once during a call"],
  [/^peak_bytes_is_bound$/, "true when the peak is an upper bound, not exact"],
];

function rawHelp(key) {
  for (const [re, text] of RAW_HELP) if (re.test(key)) return key.replace(re, text);
  return "";
}

function fmtFigure(key, v) {
  if (v === null || v === undefined) return "–";
  if (typeof v !== "number") return typeof v === "object" ? JSON.stringify(v) : String(v);
  if (/seconds/.test(key)) return fmtSeconds(v);
  if (/bytes/.test(key) && !/utilization/.test(key)) return fmtBytes(v);
  return fmtNum(v);
}

function rawSection(report) {
  const rows = [];
  for (const [what, obj] of [["cost", report.cost], ["memory", report.memory]]) {
    if (!obj) continue;
    for (const [k, v] of Object.entries(obj)) {
      if (k === "from") continue;
      rows.push([`${what}.${k}`, fmtFigure(k, v), fromOf(obj, k) || "–", rawHelp(k)]);
    }
  }
  return h("details", { class: "nbc-raw", "data-testid": "nbc-raw" },
    h("summary", null, `raw XLA figures (${rows.length})`),
    rows.length ? table(["figure", "value", "source", "what it is"], rows, "nbc-raw-table") : h("div", { class: "nbc-hint" }, "XLA reported no cost or memory analysis for this program."));
}

function funnelFigure(report) {
  const s = report.summary || {};
  const stages = [["traced ops (jaxpr)", opCount(s)], ["StableHLO ops", s.stablehlo_ops], ["HLO ops before optimisation", s.hlo_ops_before],
    ["HLO ops after optimisation", s.hlo_ops_after], ["kernels that run", s.kernels]].map(([label, value]) => ({ label, value }));
  const eager = s.eager_kernels ? ` · op by op (eager) would launch ${s.eager_kernels_exact === false ? "at least " : ""}${fmtNum(s.eager_kernels)}` : "";
  const of = report.program ? ` — ${report.program} (value_and_grad)` : "";
  return figure("nbc-chart-funnel", "From traced ops to kernels" + of, funnel(stages), "exact counts of the program", `${fmtNum(s.fusions)} fusions${eager}`);
}

function costFigures(report) {
  const fusions = report.fusions || [];
  const out = [];
  for (const [key, fmt, title] of [["flops", fmtNum, "Kernel cost: flops"], ["bytes", fmtBytes, "Kernel cost: bytes accessed"]]) {
    const top = fusions.filter((f) => f[key] != null).sort((a, b) => b[key] - a[key]).slice(0, 10);
    if (!top.length) continue;
    const sources = [...new Set(top.map((f) => fromOf(f, key) || "unknown"))].join(", ");
    const rows = top.map((f) => ({ label: `${f.name || f.id} (${trunc((f.ops || []).join("+"), 18)})`, value: f[key], text: fmt(f[key]), where: fusionWhere(f) }));
    const total = key === "flops" ? report.summary?.flops : report.summary?.bytes_accessed;
    out.push(figure(`nbc-chart-${key}`, title + ` — top ${top.length} of ${fusions.length} kernels`, barChart(rows, { fmt, label: title }), sources,
      total != null ? `program total ${fmt(total)} (${fromOf(report.summary, key === "flops" ? "flops" : "bytes_accessed") || "unknown"})` : null));
  }
  return out;
}

function profileFigures(p) {
  const peaks = { flops: val(p.peaks?.flops_per_s), bytes: val(p.peaks?.bytes_per_s) };
  const points = (p.kernels || []).map((k) => ({ name: k.name, intensity: k.intensity, achieved: k.achieved_flops_per_s, share: k.share, bound: k.bound }));
  const peakSrc = `peaks ${src(p.peaks?.flops_per_s)} / ${src(p.peaks?.bytes_per_s)}`;
  const out = [figure("nbc-chart-roofline", `Roofline: ${p.peaks?.device || "this device"}`, roofline(points, peaks),
    `time ${p.source || "measured"}, flops/bytes ${fromOf(p, "flops") || "XLA"}, ${peakSrc}`,
    peaks.flops ? `roof ${fmtNum(peaks.flops)}FLOP/s, ${fmtBytes(peaks.bytes)}/s` : "no peak figures")];
  const rows = (p.kernels || []).slice(0, 12).map((k) => [k.name, fmtSeconds(k.seconds), fmtPct(k.share), k.bound || "–",
    k.roof_fraction != null ? fmtPct(k.roof_fraction) : "–", (k.lines || []).map((l) => l.label).slice(0, 3).join(", ") || "–"]);
  out.push(h("figure", { class: "nbc-fig", "data-testid": "nbc-top-kernels" },
    h("figcaption", { class: "nbc-fig-title" }, `Top kernels by time (${fmtSeconds(p.step_seconds)} per call${p.calls ? `, median of ${p.calls} calls` : ""})`),
    table(["kernel", "time", "share", "bound", "of roof", "lines"], rows, "nbc-top-kernels-table"),
    h("div", { class: "nbc-from", "data-testid": "nbc-from" }, `source: ${p.source || "measured"}`,
      p.coverage != null ? ` · ${fmtPct(p.coverage)} of execution on named kernels` : "")));
  return out;
}

function memoryFigures(m) {
  const out = [];
  const tl = m.timeline || {};
  const kinds = Object.keys(KIND_COLOURS).filter((k) => tl.by_kind?.[k]?.some((v) => v > 0));
  if (kinds.length) {
    const steps = tl.steps || [];
    const spans = [];
    steps.forEach((st, i) => {
      const ph = st.phase === "forward" || st.phase === "backward" ? st.phase : null;
      const last = spans[spans.length - 1];
      if (ph && last && last.cls === `nbc-p-${ph}` && last.to === i) last.to = i + 1;
      else if (ph) spans.push({ from: i, to: i + 1, cls: `nbc-p-${ph}`, label: ph });
    });
    const chart = stackedArea(kinds.map((k) => ({ name: k, values: tl.by_kind[k] })),
      { spans, capacity: val(m.capacity_bytes), peakStep: m.peak_step });
    const leg = legend([...kinds.map((k) => [k, KIND_COLOURS[k]]), ...(spans.length ? [["forward", null, "nbc-p-forward"], ["backward", null, "nbc-p-backward"]] : [])]);
    out.push(figure("nbc-chart-memory", `Memory over the schedule: peak ${fmtBytes(val(m.peak_bytes))}`, h("div", null, chart, leg),
      `${tl.source || src(m.peak_bytes)} (buffer live ranges)`, m.program ? `${m.program} program` : null));
  }
  const lineRows = (m.by_line || []).slice().sort((a, b) => (val(b.bytes) || 0) - (val(a.bytes) || 0)).slice(0, 10)
    .map((r) => ({ label: r.label, value: val(r.bytes), text: fmtBytes(val(r.bytes)) }));
  if (lineRows.length) out.push(figure("nbc-chart-peak-lines", "Live at the peak, by line", barChart(lineRows, { fmt: fmtBytes, label: "bytes at peak by line" }), src(m.by_line[0]?.source ? m.by_line[0] : m.peak_bytes)));
  const mods = Array.isArray(m.by_module) ? m.by_module.map((r) => [r.module ?? r.label, val(r.bytes)]) : Object.entries(m.by_module || {}).map(([k, v]) => [k, val(v)]);
  if (mods.length) {
    const rows = mods.sort((a, b) => b[1] - a[1]).slice(0, 10).map(([label, v]) => ({ label, value: v, text: fmtBytes(v) }));
    out.push(figure("nbc-chart-peak-modules", "Live at the peak, by module", barChart(rows, { fmt: fmtBytes, label: "bytes at peak by module" }), src(m.peak_bytes)));
  }
  out.push(verdict(m));
  return out;
}

function verdict(m) {
  const fits = val(m.fits), cap = val(m.capacity_bytes), peak = val(m.peak_bytes);
  const word = fits === true ? "fits" : fits === false ? "does not fit" : "fit not decided";
  const cls = fits === true ? "nbc-ok" : fits === false ? "nbc-bad" : "nbc-unknown";
  const capText = cap != null ? `${fmtBytes(cap)} (${src(m.capacity_bytes)})` : (m.capacity_label || "capacity unknown");
  const head = val(m.headroom_bytes);
  return h("figure", { class: "nbc-fig", "data-testid": "nbc-fits" },
    h("figcaption", { class: "nbc-fig-title" }, "Will it fit?"),
    h("div", { class: "nbc-verdict " + cls, "data-fits": String(fits) }, `${word}: peak ${fmtBytes(peak)}`,
      cap != null ? ` of ${capText}` : ` · ${capText}`, head != null ? ` · headroom ${fmtBytes(head)}` : ""),
    h("div", { class: "nbc-from", "data-testid": "nbc-from" }, `source: peak ${src(m.peak_bytes)}, capacity ${src(m.capacity_bytes, cap == null ? "unknown" : "spec")}`));
}

/** The report as one program's figures: with `step` (--grad), the train step's (the
 * value_and_grad program's counts, kernels, XLA figures and folded constants). */
export function programView(report, step) {
  if (!step || !report.gradient_summary) return report;
  return { ...report, summary: report.gradient_summary, fusions: report.gradient_fusions || [], cost: report.gradient_cost,
    memory: report.gradient_memory, folded: report.gradient_folded || [], program: "train step" };
}

/** Stats tab; `step` (with --grad): the train step's figures, else the forward program's. */
export function statsPanel(full, { step = false } = {}) {
  const report = programView(full, step);
  const extras = report.extras || {};
  const parts = [h("div", { class: "nbc-figs" }, funnelFigure(report), ...costFigures(report))];
  if (extras.profile) parts.push(h("h4", null, "Where the time goes (--profile)"), h("div", { class: "nbc-figs" }, profileFigures(extras.profile)));
  if (extras.memory) parts.push(h("h4", null, "Where the bytes go (--memory)"), h("div", { class: "nbc-figs" }, memoryFigures(extras.memory)));
  parts.push(rawSection(report));
  const folded = report.folded || [];
  if (folded.length) {
    parts.push(h("details", { class: "nbc-raw", "data-testid": "nbc-folded-section", open: true },
      h("summary", null, `Folded constants (${folded.length})`),
      table(["what", "stage", "shape", "bytes", "source", "line", "hint"],
        folded.map((f) => [f.what, f.stage, f.shape || "–", fmtBytes(f.bytes), fromOf(f, "bytes") || "–", f.line ?? "–", f.hint || ""]), "nbc-folded")));
  }
  if (report.timings) {
    parts.push(h("details", { class: "nbc-raw" }, h("summary", null, "Time per stage (measured)"),
      kvTable(Object.entries(report.timings).map(([k, v]) => [k, fmtSeconds(v)]), "nbc-timings")));
  }
  for (const [key, value] of Object.entries(extras)) {
    if (key === "profile" || key === "memory" || key === "changes") continue;
    const text = value && typeof value === "object" ? value.text : typeof value === "string" ? value : null;
    parts.push(h("details", { class: "nbc-raw", "data-testid": `nbc-extra-${key}`, open: true }, h("summary", null, key),
      text ? h("pre", { class: "nbc-pre" }, text) : h("pre", { class: "nbc-pre" }, JSON.stringify(value, null, 1).slice(0, 4000))));
  }
  return h("div", { class: "nbc-stats", "data-testid": "nbc-stats", "data-program": report.program || "forward" },
    kvTable([["traced ops", fmtNum(opCount(report.summary))], ["kernels", fmtNum(report.summary?.kernels)], ["fusions", fmtNum(report.summary?.fusions)],
      ["flops", `${fmtNum(report.summary?.flops)} (${fromOf(report.summary, "flops") || "unknown"})`]], "nbc-stats-summary"), parts);
}
