// Small SVG charts for the Stats tab: horizontal bars, a log-log roofline, a stacked area
// timeline. Each returns a <figure> with a title and a caption naming where its figures come
// from ("XLA", "measured", "estimate", "spec"). nbcompile/report/charts.py draws the same charts
// for the static picture.

import { fmtBytes, fmtNum, h, s, trunc } from "./util.js";

export const KIND_COLOURS = { parameter: "#90a4ae", output: "#66bb6a", residual: "#ffa726", temporary: "#42a5f5", constant: "#bdbdbd" };

/** A chart card: title, the SVG, the source caption. */
export function figure(testid, title, svg, source, note) {
  return h("figure", { class: "nbc-fig", "data-testid": testid },
    h("figcaption", { class: "nbc-fig-title" }, title),
    svg,
    h("div", { class: "nbc-from", "data-testid": "nbc-from" }, `source: ${source}`, note ? ` · ${note}` : ""));
}

function svgRoot(w, hgt, label) {
  return s("svg", { class: "nbc-chart", width: w, height: hgt, viewBox: `0 0 ${w} ${hgt}`, role: "img", "aria-label": label });
}

/**
 * Horizontal bars: rows [{label, value, text?, cls?, where?}]; `fmt` formats values. Bars share
 * one linear scale from 0 to the largest value. Rows with `where` (the call or module a kernel
 * came from) get a first column of their own, titled `whereTitle`, before the labels.
 */
export function barChart(rows, { fmt = fmtNum, width = 460, label = "bar chart", labelChars = 28, whereTitle = "call / module", whereChars = 22 } = {}) {
  const withWhere = rows.some((r) => r.where);
  const rowH = 18, whereW = withWhere ? whereChars * 6.6 + 8 : 0, top = withWhere ? 14 : 0;
  const left = whereW + Math.min(220, labelChars * 6.6 + 8), right = 70;
  const W = width + whereW, H = rows.length * rowH + 6 + top;
  const svg = svgRoot(W, H, label);
  if (withWhere) svg.appendChild(s("text", { x: 4, y: 10, class: "nbc-chart-label nbc-chart-head", text: whereTitle }));
  const max = Math.max(1e-30, ...rows.map((r) => r.value || 0));
  rows.forEach((r, i) => {
    const y = top + 3 + i * rowH;
    const w = Math.max(1, ((r.value || 0) / max) * (W - left - right));
    if (withWhere) svg.appendChild(s("text", { x: 4, y: y + 12, class: "nbc-chart-label nbc-chart-where", "data-testid": "nbc-bar-where", text: truncStart(r.where || "–", whereChars) }));
    svg.appendChild(s("text", { x: left - 6, y: y + 12, "text-anchor": "end", class: "nbc-chart-label", text: trunc(r.label, labelChars) }));
    const bar = s("rect", { x: left, y: y + 2, width: w.toFixed(1), height: rowH - 5, rx: 2, class: "nbc-bar " + (r.cls || "") });
    bar.appendChild(s("title", { text: `${r.where ? r.where + " · " : ""}${r.label}: ${r.text ?? fmt(r.value)}` }));
    svg.appendChild(bar);
    svg.appendChild(s("text", { x: left + w + 4, y: y + 12, class: "nbc-chart-value", text: r.text ?? fmt(r.value) }));
  });
  return svg;
}

/** Cut a path from its start, keeping its end (the innermost call or module): whole names
 * first (`…/blocks_0/up`), characters where one name alone is too long. */
export function truncStart(text, n) {
  const t = String(text);
  if (t.length <= n) return t;
  const parts = t.split("/");
  while (parts.length > 1 && parts.join("/").length + 2 > n) parts.shift();
  const cut = "…/" + parts.join("/");
  return cut.length <= n ? cut : "…" + t.slice(t.length - n + 1);
}

/** The op-count funnel: each stage's count as a centred bar. */
export function funnel(stages, { width = 460 } = {}) {
  const rowH = 24, H = stages.length * rowH + 4;
  const svg = svgRoot(width, H, "op counts from tracing to kernels");
  const max = Math.max(1, ...stages.map((st) => st.value || 0));
  const left = 200, mid = left + (width - left) / 2;
  stages.forEach((st, i) => {
    const y = 2 + i * rowH;
    const w = Math.max(2, ((st.value || 0) / max) * (width - left - 8));
    svg.appendChild(s("rect", { x: (mid - w / 2).toFixed(1), y, width: w.toFixed(1), height: rowH - 4, rx: 3, class: "nbc-bar nbc-funnel-" + i }));
    svg.appendChild(s("text", { x: 6, y: y + 14, class: "nbc-chart-label", text: st.label }));
    svg.appendChild(s("text", { x: mid, y: y + 14, "text-anchor": "middle", class: "nbc-chart-value nbc-on-bar", text: st.value == null ? "–" : fmtNum(st.value) }));
  });
  return svg;
}

const log10 = (v) => Math.log10(Math.max(v, 1e-30));

/**
 * Roofline: points [{name, intensity, achieved, share, bound}], peaks {flops, bytes}. Log-log:
 * x = arithmetic intensity (flop/byte), y = achieved FLOP/s; the roof is min(peak FLOP/s,
 * intensity x peak bytes/s).
 */
export function roofline(points, peaks, { width = 460, height = 260 } = {}) {
  const L = 56, R = 12, T = 10, B = 34;
  const svg = svgRoot(width, height, "roofline: achieved FLOP/s against arithmetic intensity");
  const pts = points.filter((p) => p.intensity > 0 && p.achieved > 0);
  const ridge = peaks.flops && peaks.bytes ? peaks.flops / peaks.bytes : 1;
  const xs = pts.map((p) => p.intensity).concat([ridge]);
  const ys = pts.map((p) => p.achieved).concat(peaks.flops ? [peaks.flops] : []);
  const x0 = Math.floor(log10(Math.min(...xs)) - 0.5), x1 = Math.ceil(log10(Math.max(...xs)) + 0.5);
  const y0 = Math.floor(log10(Math.min(...ys)) - 0.5), y1 = Math.ceil(log10(Math.max(...ys)) + 0.3);
  const X = (v) => L + ((log10(v) - x0) / Math.max(1e-9, x1 - x0)) * (width - L - R);
  const Y = (v) => T + (1 - (log10(v) - y0) / Math.max(1e-9, y1 - y0)) * (height - T - B);
  svg.appendChild(s("rect", { x: L, y: T, width: width - L - R, height: height - T - B, class: "nbc-plot" }));
  for (let e = x0; e <= x1; e++) svg.appendChild(s("text", { x: X(10 ** e), y: height - B + 14, "text-anchor": "middle", class: "nbc-axis", text: fmtNum(10 ** e) }));
  for (let e = y0; e <= y1; e++) svg.appendChild(s("text", { x: L - 4, y: Y(10 ** e) + 4, "text-anchor": "end", class: "nbc-axis", text: fmtNum(10 ** e) }));
  svg.appendChild(s("text", { x: (L + width - R) / 2, y: height - 4, "text-anchor": "middle", class: "nbc-axis", text: "arithmetic intensity (flop / byte)" }));
  svg.appendChild(s("text", { x: 10, y: T + (height - T - B) / 2, class: "nbc-axis", transform: `rotate(-90 10 ${T + (height - T - B) / 2})`, "text-anchor": "middle", text: "FLOP/s" }));
  if (peaks.flops && peaks.bytes) {
    const a = 10 ** x0, b = 10 ** x1;
    const d = `M${X(a).toFixed(1)},${Y(Math.min(peaks.flops, a * peaks.bytes)).toFixed(1)} L${X(ridge).toFixed(1)},${Y(peaks.flops).toFixed(1)} L${X(b).toFixed(1)},${Y(peaks.flops).toFixed(1)}`;
    svg.appendChild(s("path", { d, class: "nbc-roof", "data-testid": "nbc-roof" }));
  }
  const sorted = [...pts].sort((p, q) => (q.share || 0) - (p.share || 0));
  sorted.forEach((p, i) => {
    const c = s("circle", { cx: X(p.intensity).toFixed(1), cy: Y(p.achieved).toFixed(1), r: (3 + 9 * Math.sqrt(p.share || 0)).toFixed(1),
      class: "nbc-point nbc-bound-" + (p.bound || "none"), "data-kernel": p.name });
    c.appendChild(s("title", { text: `${p.name}: ${fmtNum(p.achieved)}FLOP/s at ${p.intensity.toPrecision(3)} flop/B, ${((p.share || 0) * 100).toFixed(1)}% of time, ${p.bound || "?"}-bound` }));
    svg.appendChild(c);
    if (i < 3) svg.appendChild(s("text", { x: X(p.intensity) + 8, y: Y(p.achieved) - 6, class: "nbc-chart-value", text: trunc(p.name, 22) }));
  });
  return svg;
}

/**
 * Stacked areas over steps: series [{name, values}] (same length), shaded spans [{from, to,
 * cls, label}], an optional capacity line and a peak marker.
 */
export function stackedArea(series, { width = 460, height = 220, spans = [], capacity = null, peakStep = null } = {}) {
  const L = 60, R = 10, T = 10, B = 30;
  const svg = svgRoot(width, height, "memory live over the program's schedule, stacked by kind");
  const n = Math.max(1, ...series.map((x) => x.values.length));
  const totals = Array.from({ length: n }, (_, i) => series.reduce((t, x) => t + (x.values[i] || 0), 0));
  const maxY = Math.max(1, ...totals, capacity && capacity < 4 * Math.max(...totals) ? capacity : 0);
  const X = (i) => L + (n <= 1 ? 0 : (i / (n - 1)) * (width - L - R));
  const Y = (v) => T + (1 - v / maxY) * (height - T - B);
  svg.appendChild(s("rect", { x: L, y: T, width: width - L - R, height: height - T - B, class: "nbc-plot" }));
  for (const sp of spans) {
    const r = s("rect", { x: X(sp.from).toFixed(1), y: T, width: Math.max(1, X(sp.to) - X(sp.from)).toFixed(1), height: height - T - B, class: "nbc-span " + sp.cls });
    r.appendChild(s("title", { text: sp.label }));
    svg.appendChild(r);
  }
  const base = new Array(n).fill(0);
  for (const x of series) {
    const top = base.map((b, i) => b + (x.values[i] || 0));
    let d = `M${X(0).toFixed(1)},${Y(top[0]).toFixed(1)}`;
    for (let i = 1; i < n; i++) d += `L${X(i).toFixed(1)},${Y(top[i]).toFixed(1)}`;
    for (let i = n - 1; i >= 0; i--) d += `L${X(i).toFixed(1)},${Y(base[i]).toFixed(1)}`;
    const p = s("path", { d: d + "Z", fill: KIND_COLOURS[x.name] || "#9e9e9e", class: "nbc-area", "data-kind": x.name });
    p.appendChild(s("title", { text: x.name }));
    svg.appendChild(p);
    top.forEach((v, i) => { base[i] = v; });
  }
  for (const v of [0, maxY / 2, maxY]) svg.appendChild(s("text", { x: L - 4, y: Y(v) + 4, "text-anchor": "end", class: "nbc-axis", text: fmtBytes(v) }));
  svg.appendChild(s("text", { x: (L + width - R) / 2, y: height - 6, "text-anchor": "middle", class: "nbc-axis", text: "step of the schedule" }));
  if (capacity && capacity <= maxY) {
    svg.appendChild(s("line", { x1: L, x2: width - R, y1: Y(capacity), y2: Y(capacity), class: "nbc-capacity" }));
    svg.appendChild(s("text", { x: width - R - 4, y: Y(capacity) - 4, "text-anchor": "end", class: "nbc-chart-value", text: `capacity ${fmtBytes(capacity)}` }));
  }
  if (peakStep != null && peakStep < n) {
    svg.appendChild(s("line", { x1: X(peakStep), x2: X(peakStep), y1: T, y2: height - B, class: "nbc-peak" }));
    svg.appendChild(s("text", { x: X(peakStep) + 3, y: T + 12, class: "nbc-chart-value", text: `peak ${fmtBytes(totals[peakStep])}` }));
  }
  return svg;
}

/** A legend row of coloured swatches. */
export function legend(items) {
  return h("div", { class: "nbc-legend" }, items.map(([label, colour, cls]) =>
    h("span", { class: "nbc-legend-item" }, h("span", { class: "nbc-swatch " + (cls || ""), style: colour ? `background:${colour}` : null }), label)));
}
