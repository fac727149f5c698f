// Loops in the picture (SPEC §9.3): the analysis names a loop's body group as the loop
// (`scan × 6 · line 6`, report.loops[*].label); with a profile this module draws, in that
// group's header (or on its box when collapsed), one bar per iteration, as tall as the
// iteration's share of the slowest one. Hover: iteration k, its time, its slowest kernels.
// graphview.js calls decorateLoop for every drawn group; nothing else knows about loops.

import { fmtSeconds, s } from "./util.js";

const STRIP_H = 11; // on a collapsed loop's reserved line
const PAD_H = 8; // in an expanded loop's bottom padding (scene.js PAD)
const memo = new WeakMap();

/** Group id -> {loop, time} for one prepared graph: the loops of its program (the gradient
 * graph's are report.gradient_loops) with their profiled iterations where measured. */
export function loopGroups(pg) {
  if (memo.has(pg)) return memo.get(pg);
  const report = pg.report || {};
  const gradient = pg.graph === report.graphs?.gradient;
  const loops = (gradient ? report.gradient_loops : report.loops) || [];
  // the profile measured the program of the Graph/Compiled tabs, not the value_and_grad one
  const times = gradient ? [] : report.extras?.profile?.loops || [];
  const byLoop = new Map(times.map((t) => [t.loop, t]));
  const out = new Map();
  for (const loop of loops) {
    const gid = pg.isCompiled ? (loop.compiled_groups || [])[0] : loop.body_group;
    if (gid != null) out.set(gid, { loop, time: byLoop.get(loop.index) || null });
  }
  memo.set(pg, out);
  return out;
}

/** Lines a collapsed loop group adds to its box: one blank line that holds its strip. */
export function loopLeafLines(pg, group) {
  const found = loopGroups(pg).get(group.id);
  return found?.time?.bars?.length ? [""] : [];
}

/** Mark a drawn group box that is a loop and add its per-iteration strip: in the bottom
 * padding of an expanded group (``el`` its header, in graph coordinates) or on the blank last
 * line loopLeafLines reserved on a collapsed one (``el`` its box, at its own origin). */
export function decorateLoop(pg, el, box, collapsed) {
  const gid = box.group?.id;
  const found = gid != null ? loopGroups(pg).get(gid) : null;
  if (!found) return;
  const { loop, time } = found;
  el.setAttribute("data-loop", String(loop.index));
  el.setAttribute("data-trip-count", loop.trip_count == null ? "" : String(loop.trip_count));
  const bars = time?.bars || [];
  if (!bars.length) return;
  const n = time.iteration_count ?? bars.length;
  const height = collapsed ? STRIP_H : PAD_H;
  const x0 = (collapsed ? 0 : box.x) + 7;
  const width = box.w - 14;
  const y0 = collapsed ? box.h - STRIP_H - 5 : box.y + box.h - PAD_H - 1;
  const step = width / bars.length;
  const most = Math.max(...bars.map((b) => b.slowest), 1e-12);
  const each = bars.length === n ? "" : ` in ${bars.length} bars (each: a run of iterations, as tall as its slowest)`;
  const strip = s("g", { class: "nbc-loop-strip", "data-testid": "nbc-loop-strip", "data-loop": String(loop.index),
    "aria-label": `${loop.label}: ${n} iterations measured${each}` });
  strip.appendChild(s("rect", { class: "nbc-loop-strip-bg", x: x0.toFixed(1), y: y0.toFixed(1), width: width.toFixed(1), height, rx: 2 }));
  bars.forEach((bar, k) => {
    const hgt = Math.max(1, (height - 1) * (bar.slowest / most));
    const rect = s("rect", { class: "nbc-loop-bar", "data-testid": "nbc-loop-bar", "data-iteration": String(bar.first),
      "data-last": String(bar.last), "data-seconds": String(bar.first === bar.last ? bar.slowest : bar.seconds),
      x: (x0 + k * step + 0.5).toFixed(1), y: (y0 + height - hgt).toFixed(1),
      width: Math.max(1, step - 1).toFixed(1), height: hgt.toFixed(1) });
    rect.appendChild(s("title", { text: barText(loop, time, k) }));
    strip.appendChild(rect);
  });
  el.appendChild(strip);
}

/** Hover text: `iteration 3 of 6: 1.06 ms · ynn_fusion 590 µs, ynn_fusion.1 409 µs, …`; for a
 * bar of several iterations `iterations 64–127 of 6400: mean 1.0 ms, slowest 97 (3.1 ms)`. */
export function barText(loop, time, k) {
  const bar = time.bars[k];
  const n = time.iteration_count ?? time.bars.length;
  const kernels = bar.kernels || [];
  const shown = kernels.map(([name, sec]) => `${name} ${fmtSeconds(sec)}`).join(", ");
  const more = bar.more ? `, +${bar.more} more` : "";
  const head = bar.first === bar.last
    ? `iteration ${bar.first} of ${n}: ${fmtSeconds(bar.slowest)}`
    : `iterations ${bar.first}–${bar.last} of ${n}: mean ${fmtSeconds(bar.seconds)}, slowest ${bar.slowest_iteration} (${fmtSeconds(bar.slowest)})`;
  const per = bar.first === bar.last ? "" : " (mean per iteration)";
  return `${loop.label}\n${head}` + (kernels.length ? `\nkernels${per}: ${shown}${more}` : "");
}
