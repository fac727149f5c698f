// The Passes tab and the kernel code panel, from report.extras.passes (nbcompile/report/metal.py):
// XLA's passes that changed the program (counts per step as a chart, the selected step's diff,
// the kernels formed at fusion passes) and the machine code of the costliest kernels, each
// instruction coloured by the source line it came from. nbcompile/report/passesfig.py draws the
// same chart for the static picture.

import { figure } from "./charts.js";
import { lineText } from "./panels.js";
import { activatable, fmtNum, h, s, trunc } from "./util.js";

/** One colour per source location of a kernel (passesfig.LOCATION_COLOURS). */
export const LOCATION_COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];

const stepLabel = (st) => `${st.index} ${st.pipeline}/${st.name}`;

function delta(st) {
  const add = Object.entries(st.added || {}).map(([op, n]) => `+${n} ${op}`);
  const rem = Object.entries(st.removed || {}).map(([op, n]) => `−${n} ${op}`);
  return [...add, ...rem].join(" ") || "no opcode count changed";
}

/** Instructions (blue) and fusions (orange) after each step, one column per step. */
function passChart(steps, onPick) {
  const col = 22, left = 44, top = 6, plot = 120;
  const width = Math.max(360, left + col * steps.length + 16), height = top + plot + 36;
  const mostI = Math.max(1, ...steps.map((st) => st.instructions)), mostF = Math.max(1, ...steps.map((st) => st.fusions));
  const svg = s("svg", { class: "nbc-chart nbc-passes-chart", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": "instructions and fusions after each pass that changed the program", "data-testid": "nbc-passes-chart" });
  svg.appendChild(s("text", { x: 4, y: top + 10, class: "nbc-chart-value", text: fmtNum(mostI) }));
  svg.appendChild(s("text", { x: 4, y: top + plot, class: "nbc-chart-value", text: "0" }));
  const cols = steps.map((st, i) => {
    const x = left + i * col;
    const hi = (plot * st.instructions) / mostI, hf = (plot * st.fusions) / mostF;
    const g = s("g", { class: "nbc-step" + (st.formed?.length ? " nbc-step-formed" : ""), "data-kind": "step", "data-name": stepLabel(st),
      "data-step": st.index, "data-selected": "false" });
    g.appendChild(s("title", { text: `${stepLabel(st)}: ${st.instructions} instructions, ${st.fusions} fusions` +
      (st.formed?.length ? `; kernels formed: ${st.formed.slice(0, 6).join(", ")}` : "") }));
    g.appendChild(s("rect", { x, y: top, width: col - 2, height: plot, class: "nbc-step-bg" }));
    g.appendChild(s("rect", { x: x + 1, y: (top + plot - hi).toFixed(1), width: 9, height: Math.max(hi, 1).toFixed(1), class: "nbc-step-ops" }));
    g.appendChild(s("rect", { x: x + 10, y: (top + plot - hf).toFixed(1), width: 9, height: Math.max(hf, 1).toFixed(1), class: "nbc-step-fusions" }));
    g.appendChild(s("text", { x: x + 10, y: top + plot + 12, "text-anchor": "middle", class: "nbc-chart-label", text: String(st.index) }));
    g.addEventListener("click", () => onPick(i));
    svg.appendChild(g);
    return g;
  });
  // one band per run of steps in the same pipeline, labelled with its name
  for (const run of pipelineRuns(steps)) {
    const x = left + run.from * col, w = (run.to - run.from + 1) * col - 2;
    const band = s("g", { class: "nbc-pipeline", "data-kind": "pipeline", "data-name": run.pipeline });
    band.appendChild(s("title", { text: `pipeline ${run.pipeline}` }));
    band.appendChild(s("rect", { x, y: top + plot + 17, width: w, height: 14, rx: 2, class: "nbc-pipeline-band" }));
    band.appendChild(s("text", { x: x + 2, y: top + plot + 28, class: "nbc-chart-label", text: trunc(run.pipeline, Math.max(1, Math.floor(w / 6))) }));
    svg.appendChild(band);
  }
  const legend = `blue: instructions (max ${fmtNum(mostI)}) · orange: fusions (max ${fmtNum(mostF)}) · shaded: kernels formed · x: XLA's step`;
  return { svg, cols, legend };
}

/** Runs of consecutive steps in one pipeline: [{pipeline, from, to}] (indices into steps). */
export function pipelineRuns(steps) {
  const runs = [];
  steps.forEach((st, i) => {
    const last = runs[runs.length - 1];
    if (last && last.pipeline === st.pipeline) last.to = i;
    else runs.push({ pipeline: st.pipeline, from: i, to: i });
  });
  return runs;
}

/** The unified diff text, each line coloured by its first character. */
function diffView(st, limit) {
  if (!st.changed) return h("div", { class: "nbc-hint", "data-testid": "nbc-pass-diff" }, "the module as XLA received it (this step changed nothing)");
  const pre = h("pre", { class: "nbc-pre nbc-pass-diff", "data-testid": "nbc-pass-diff" });
  const formed = new Set(st.formed || []);
  for (const line of (st.diff || "").split("\n")) {
    const c = line[0];
    const cls = line.startsWith("+++") || line.startsWith("---") ? "nbc-diff-file" : c === "+" ? "nbc-diff-add" : c === "-" ? "nbc-diff-del" : c === "@" ? "nbc-diff-hunk" : null;
    const name = c === "+" ? /^\+\s*(?:ROOT\s+)?%?([\w.-]+)\s*=/.exec(line)?.[1] : null;
    pre.appendChild(h("div", { class: [cls, name && formed.has(name) ? "nbc-diff-formed" : null].filter(Boolean).join(" ") || null }, line || " "));
  }
  const cut = st.diff_chars ? h("div", { class: "nbc-hint", "data-testid": "nbc-pass-diff-cut" },
    `diff cut at ${fmtNum(st.diff.length)} of ${fmtNum(st.diff_chars)} characters (the view ships ${fmtNum(limit)} per step): c.passes.diff(${st.index}) has it all`) : null;
  const note = h("div", { class: "nbc-hint" }, `op metadata (metadata={…}) left out; c.passes.diff(${st.index}) has it`);
  return h("div", null, pre, cut, note);
}

/** The Passes tab: chart, step buttons (and ←/→ keys), the selected step's counts and diff. */
export function passesPanel(report, select) {
  const p = report.extras.passes;
  const steps = p.steps || [];
  const wrap = h("div", { class: "nbc-passes", "data-testid": "nbc-passes", tabindex: "0",
    "aria-label": "XLA passes: left and right arrow keys step through them" });
  let at = Math.max(0, steps.findIndex((st) => st.formed?.length));
  const chart = passChart(steps, (i) => show(i));
  const label = h("span", { class: "nbc-pass-label", "data-testid": "nbc-pass-label", "aria-live": "polite" });
  const prev = h("button", { class: "nbc-btn", type: "button", "data-testid": "nbc-pass-prev", title: "previous pass (←)" }, "◀");
  const next = h("button", { class: "nbc-btn", type: "button", "data-testid": "nbc-pass-next", title: "next pass (→)" }, "▶");
  const detail = h("div", { class: "nbc-pass-detail", "data-testid": "nbc-pass-detail" });
  prev.addEventListener("click", () => show(at - 1));
  next.addEventListener("click", () => show(at + 1));
  wrap.addEventListener("keydown", (ev) => {
    if (ev.key === "ArrowLeft" || ev.key === "ArrowRight") {
      ev.preventDefault();
      show(at + (ev.key === "ArrowRight" ? 1 : -1));
    }
  });
  function show(i) {
    if (!steps.length) return;
    at = Math.max(0, Math.min(steps.length - 1, i));
    const st = steps[at];
    chart.cols.forEach((g, j) => { g.setAttribute("data-selected", String(j === at)); g.classList.toggle("nbc-step-on", j === at); });
    prev.disabled = at === 0;
    next.disabled = at === steps.length - 1;
    label.textContent = `step ${at + 1} of ${steps.length} changed: XLA step ${st.index}, pipeline ${st.pipeline}, pass ${st.name}`;
    wrap.setAttribute("data-step", String(st.index));
    const final = new Set(st.kernels || []);
    const kernels = (st.formed || []).map((k) => {
      if (!final.has(k)) return h("span", { class: "nbc-chip", title: "renamed or fused further by a later pass" }, k);
      const a = h("span", { class: "nbc-chip nbc-link nbc-formed", "data-testid": "nbc-pass-kernel" }, k);
      activatable(a, () => select("fusion:" + k));
      return a;
    });
    detail.textContent = "";
    detail.append(
      h("table", { class: "nbc-kv" }, h("tbody", null,
        h("tr", null, h("th", null, "pipeline"), h("td", { "data-testid": "nbc-pass-pipeline" }, st.pipeline)),
        h("tr", null, h("th", null, "pass"), h("td", null, st.name)),
        h("tr", null, h("th", null, "instructions"), h("td", null, `${fmtNum(st.instructions)} (XLA)`)),
        h("tr", null, h("th", null, "fusions"), h("td", null, `${fmtNum(st.fusions)} (XLA)`)),
        h("tr", null, h("th", null, "added / removed"), h("td", null, delta(st))),
        h("tr", null, h("th", null, "kernels formed"), h("td", { "data-testid": "nbc-pass-kernels" }, kernels.length ? kernels : "–",
          st.formed_total > kernels.length ? ` … and ${st.formed_total - kernels.length} more` : null)))),
      diffView(st, p.diff_limit));
  }
  const steer = h("div", { class: "nbc-pass-steer" }, prev, next, label);
  wrap.append(
    figure("nbc-fig-passes", `XLA's passes that changed ${p.module} (${steps.length} of ${p.total_steps} steps)`, chart.svg, p.source, chart.legend),
    steer, detail);
  show(at);
  return wrap;
}

/** The code of kernel `name` (when the report carries it), or null. */
export function kernelCodeOf(report, name) {
  return (report.extras?.passes?.kernel_code || []).find((k) => k.name === name) || null;
}

/**
 * A kernel's machine code, each instruction coloured by its first source location; clicking a
 * location (a source line) highlights the instructions it made. Shown in the Compiled tab.
 */
export function kernelCodePanel(report, name) {
  const p = report.extras?.passes;
  const wrap = h("div", { class: "nbc-kcode", "data-testid": "nbc-kernel-code", "data-kernel": name || "" });
  if (!p || !name) return wrap;
  const k = kernelCodeOf(report, name);
  if (!k) {
    const why = (p.kernels_without_code || []).find((x) => x.name === name);
    wrap.appendChild(h("div", { class: "nbc-hint" }, why ? `${name}: ${why.why}` :
      `the report carries the code of the ${(p.kernel_code || []).length} costliest kernels; ${name}'s: c.kernel_code(${JSON.stringify(name)})`));
    return wrap;
  }
  const colour = (i) => LOCATION_COLOURS[i % LOCATION_COLOURS.length];
  const rows = k.asm.map((text) => h("div", { class: "nbc-asm" }, text));
  for (const [start, count, ids] of k.at || []) {
    for (let i = start; i < start + count && i < rows.length; i++) {
      rows[i].setAttribute("data-loc", ids.join(","));
      if (ids.length) rows[i].style.borderLeftColor = colour(ids[0]);
    }
  }
  let on = null;
  const legend = (k.locations || []).map((loc, i) => {
    const item = h("span", { class: "nbc-chip nbc-loc", "data-testid": "nbc-code-line", "data-loc": String(i), "data-line": loc.key,
      title: lineText(report, loc.key) || loc.label }, h("span", { class: "nbc-swatch", style: `background:${colour(i)}` }), ` ${loc.label} `,
    h("code", null, trunc(lineText(report, loc.key), 40)));
    activatable(item, () => {
      on = on === i ? null : i;
      for (const it of legendEls) it.classList.toggle("nbc-loc-on", it === item && on !== null);
      for (const r of rows) {
        const hit = on !== null && (r.getAttribute("data-loc") || "").split(",").includes(String(i));
        r.classList.toggle("nbc-asm-hl", hit);
        r.setAttribute("data-highlighted", String(hit));
      }
    });
    return item;
  });
  const legendEls = legend;
  const width = k.vector_width ? `${k.vector_width}-bit vectors` : "no vector registers";
  wrap.append(...[
    h("h4", null, `${k.library ? "Stand-in code" : "Code"} of ${k.name}: ${fmtNum(k.instructions)} ${k.isa} instructions, ${width}`),
    k.shared_with ? h("div", { class: "nbc-hint" }, `XLA compiled this fusion once with ${k.shared_with}: this is that code`) : null,
    k.library ? h("div", { class: "nbc-hint nbc-stand-in", "data-testid": "nbc-code-stand-in" },
      `${k.library} runs ${k.name}: this is XLA's own code for the same ops, compiled with ${k.library} off` +
      ` (kernels ${(k.stand_in || []).join(", ")}) — not what runs`) : null,
    h("div", { class: "nbc-kcode-lines" }, "source lines (click one to highlight its instructions): ", legend.length ? legend : "none known"),
    h("div", { class: "nbc-hint", "data-testid": "nbc-code-mapping" }, "the line mapping is per kernel, not per instruction — " + k.mapping),
    h("pre", { class: "nbc-pre nbc-asm-code", "data-testid": "nbc-asm" }, rows),
    k.cut ? h("div", { class: "nbc-hint" }, `first ${rows.length} of ${k.instructions} instructions: c.kernel_code(${JSON.stringify(k.name)}).asm has them all`) : null,
    h("div", { class: "nbc-from" }, `source: ${k.source}; ${p.source}`)].filter(Boolean));
  return wrap;
}
