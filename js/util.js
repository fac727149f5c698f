// Small DOM and formatting helpers shared by every part of the view.

export const SVG_NS = "http://www.w3.org/2000/svg";

/** Create an HTML element: h("div", {class: "x", onclick: fn}, child, "text"). */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
  return el;
}

/** Create an SVG element with attributes. */
export function s(tag, attrs) {
  const el = document.createElementNS(SVG_NS, tag);
  setAttrs(el, attrs);
  return el;
}

function setAttrs(el, attrs) {
  if (!attrs) return;
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
}

const UNITS = ["", "K", "M", "G", "T", "P"];

/** 1234567 -> "1.23M"; null -> "–". */
export function fmtNum(x) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  let v = Math.abs(x), i = 0;
  while (v >= 1000 && i < UNITS.length - 1) { v /= 1000; i++; }
  const digits = v >= 100 || i === 0 ? 0 : v >= 10 ? 1 : 2;
  return (x < 0 ? "-" : "") + v.toFixed(i === 0 && !Number.isInteger(v) ? 2 : digits) + UNITS[i];
}

/** Bytes in binary units: 1536 -> "1.5 KiB". */
export function fmtBytes(x) {
  if (x === null || x === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = x, i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? String(v) : v.toFixed(v >= 100 ? 0 : 1)) + " " + units[i];
}

export function fmtSeconds(x) {
  if (x === null || x === undefined) return "–";
  if (x > 0 && x < 1e-6) return (x * 1e9).toFixed(0) + " ns";
  if (x < 1e-3) return (x * 1e6).toFixed(x < 1e-5 ? 1 : 0) + " µs";
  if (x < 1) return (x * 1e3).toFixed(1) + " ms";
  return x.toFixed(2) + " s";
}

export function fmtPct(x) {
  if (x === null || x === undefined) return "–";
  return (x * 100).toFixed(x >= 0.1 ? 0 : 1) + "%";
}

/** Truncate to n characters with an ellipsis. */
export function trunc(text, n) {
  text = String(text ?? "");
  return text.length > n ? text.slice(0, Math.max(1, n - 1)) + "…" : text;
}

/** Make an element act as a button for mouse and keyboard (Enter/Space). */
export function activatable(el, fn) {
  el.setAttribute("tabindex", "0");
  if (!el.getAttribute("role")) el.setAttribute("role", "button");
  el.addEventListener("click", (ev) => fn(ev));
  el.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); fn(ev); }
  });
}

/** Key/value table: rows = [[label, value], ...]; values may be nodes. */
export function kvTable(rows, testid) {
  return h("table", { class: "nbc-kv", "data-testid": testid },
    h("tbody", null, rows.filter(Boolean).map(([k, v]) => h("tr", null, h("th", null, k), h("td", null, v)))));
}

/** Plain table from a header list and row arrays. */
export function table(headers, rows, testid) {
  return h("table", { class: "nbc-table", "data-testid": testid },
    h("thead", null, h("tr", null, headers.map((x) => h("th", null, x)))),
    h("tbody", null, rows.map((r) => h("tr", null, r.map((c) => h("td", null, c))))));
}
