// The Source tab: every cell (and user file) the program came from, each line with what it cost
// and the kernels it became (like cython -a). The heat map switches between the static flops
// share (estimate), measured time per line (--profile) and bytes live at the peak (--memory).

import { activatable, fmtBytes, fmtNum, fmtPct, fmtSeconds, h } from "./util.js";
import { src, val } from "./stats.js";

/** Every source the view shows: [{label, prefix, lines, whole}] (the compiling cell first). */
export function sourcesOf(report) {
  const out = [{ label: "", prefix: "", lines: report.source?.lines || [], whole: true }];
  for (const s of report.sources || []) out.push({ label: s.label || "", prefix: s.key_prefix || "", lines: s.lines || [], whole: s.cell != null });
  return out;
}

/** Heat measures available for this report: {key: {label, from, of(key, n) -> number|null, fmt, max}}.
 * `step`: the flops share of the train step (--grad: the value_and_grad program), else of the
 * forward program; time and bytes per line are of the program measured (the caption says it). */
export function heatModes(report, step = false) {
  const modes = {};
  const info = (step ? report.gradient_lines : report.lines) || {};
  const program = step ? "the train step's" : "the program's";
  modes.flops = { label: "flops share", from: "estimate", of: (key) => info[key]?.cost_share ?? null, fmt: fmtPct, max: 1, caption: `share of ${program} flops (estimate from XLA's per-kernel cost, a kernel split evenly over its lines)` };
  const p = report.extras?.profile;
  if (p) {
    const byLabel = new Map((p.by_line || []).map((r) => [r.label, r.seconds]));
    const of = (key, prefix, n) => (prefix === "" ? p.by_cell_line?.[String(n)] ?? null : byLabel.get(key) ?? null);
    const all = [...Object.values(p.by_cell_line || {}), ...byLabel.values()];
    modes.time = { label: "time per line", from: p.source || "measured", of, fmt: fmtSeconds, max: Math.max(1e-12, ...all),
      caption: `time per call on each line (${p.source || "measured"}, median of ${p.calls || "?"} calls; ${fmtSeconds(p.step_seconds)} per call${report.gradient ? "; of the forward program" : ""})` };
  }
  const m = report.extras?.memory;
  if (m) {
    const byLabel = new Map((m.by_line || []).map((r) => [r.label, val(r.bytes)]));
    const of = (key, prefix, n) => (prefix === "" ? val(m.by_cell_line?.[String(n)]) ?? null : byLabel.get(key) ?? null);
    modes.bytes = { label: "bytes at peak", from: src(m.peak_bytes), of, fmt: fmtBytes, max: Math.max(1, val(m.peak_bytes) || 0),
      caption: `bytes live at the memory peak made by each line (${src(m.peak_bytes)}; peak ${fmtBytes(val(m.peak_bytes))}${m.program ? `; of the ${m.program === "value_and_grad" ? "train step (value_and_grad)" : m.program + " program"}` : ""})` };
  }
  return modes;
}

/** A line's kernels in the order its chips show them: forward and backward in turn (a train
 * step's line shows both, not its first four forward kernels), else as listed
 * (report/fallback.py: line_kernels). */
export function lineKernels(ids, fusionById) {
  const fwd = ids.filter((id) => fusionById.get(id)?.phase !== "backward");
  const bwd = ids.filter((id) => fusionById.get(id)?.phase === "backward");
  if (!fwd.length || !bwd.length) return ids;
  const out = [];
  for (let i = 0; i < Math.max(fwd.length, bwd.length); i++) out.push(...[fwd[i], bwd[i]].filter((x) => x != null));
  return out;
}

/** The Source tab; `step` (with --grad): the train step's kernels per line (`selectKernel(id)`
 * selects one in the train step's graph), else the forward program's. */
export function sourcePanel(report, select, { step = false, selectKernel = null } = {}) {
  step = step && !!report.gradient_lines;
  const info = (step ? report.gradient_lines : report.lines) || {};
  const modes = heatModes(report, step);
  let mode = modes.time ? "time" : "flops";
  const fusionById = new Map(((step ? report.gradient_fusions : report.fusions) || []).map((f) => [f.id, f]));
  const pick = (fid) => (step && selectKernel ? selectKernel(fid) : select("fusion:" + fid));
  const rows = [];
  const body = h("div", { class: "nbc-source-body" });
  for (const { label, prefix, lines, whole } of sourcesOf(report)) {
    if (label) body.appendChild(h("div", { class: "nbc-source-head", "data-testid": "nbc-source-head" }, label));
    lines.forEach((text, i) => {
      const n = i + 1;
      const key = prefix + n;
      const e = info[key];
      if (!whole && !e) return; // a user file: only the lines the program came from
      const chips = lineKernels(e?.fusions || [], fusionById).slice(0, 4).map((fid) => {
        const chip = h("span", { class: "nbc-chip", "data-fusion": fid, title: chipTitle(fusionById.get(fid)) }, fid);
        activatable(chip, (ev) => { ev.stopPropagation(); pick(fid); });
        return chip;
      });
      const more = (e?.fusions?.length || 0) - chips.length;
      const metric = h("span", { class: "nbc-share" });
      const row = h("div", { class: "nbc-line" + (e ? " nbc-has" : ""), "data-testid": `nbc-line-${key}`, "data-line": key, "aria-label": `line ${label ? label + " " : ""}${n}` },
        h("span", { class: "nbc-lno" }, String(n)), metric,
        h("code", { class: "nbc-code" }, text || " "),
        h("span", { class: "nbc-ann" }, opsOf(e) ? `${opsOf(e)} ops → ${e.fusions?.length || 0} kernels ` : "",
          chips, more > 0 ? h("span", { class: "nbc-more" }, `+${more}`) : null));
      activatable(row, () => select("line:" + key));
      rows.push({ row, metric, key, prefix, n });
      body.appendChild(row);
    });
  }
  const caption = h("div", { class: "nbc-hint", "data-testid": "nbc-heat-caption" });
  const buttons = Object.entries(modes).map(([k, m]) => {
    const b = h("button", { class: "nbc-btn nbc-heat-btn", type: "button", "data-testid": `nbc-heat-${k}`, "aria-pressed": "false" }, `${m.label} (${m.from})`);
    b.addEventListener("click", () => { mode = k; paint(); });
    return [k, b];
  });
  let paint = () => {
    const m = modes[mode];
    for (const [k, b] of buttons) b.setAttribute("aria-pressed", String(k === mode));
    caption.textContent = `Each line: ${m.caption}, and the XLA kernels it became. Click a line to highlight its ops.`;
    for (const r of rows) {
      const v = m.of(r.key, r.prefix, r.n);
      r.metric.textContent = v == null ? "" : m.fmt(v);
      r.metric.title = `${m.label} (${m.from})`;
      const share = v == null ? 0 : Math.min(1, v / m.max);
      r.row.style.setProperty("--nbc-share", share > 0 ? String(Math.min(1, 0.12 + share * 1.5)) : "0");
      r.row.setAttribute("data-heat", v == null ? "" : String(v));
    }
  };
  const panel = h("div", { class: "nbc-source", "data-testid": "nbc-source", "data-program": step ? "train step" : "forward" },
    h("div", { class: "nbc-heat-bar", "data-testid": "nbc-heat-modes" }, "heat: ", buttons.map(([, b]) => b)), caption, body);
  const repaint = paint;
  paint = () => { repaint(); panel.setAttribute("data-heat-mode", mode); };
  paint();
  return panel;
}

/** A line's traced op count: its nodes (the train step's lines carry the count). */
const opsOf = (e) => e?.ops ?? e?.nodes?.length ?? 0;

function chipTitle(f) {
  if (!f) return "";
  return `${f.kind} fusion: ${(f.ops || []).join(", ")} · ${fmtNum(f.flops)} flops · ${fmtBytes(f.bytes)}`;
}
