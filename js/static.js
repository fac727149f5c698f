// Static HTML front end: window.nbcompileView.mount(root, data) replaces the static picture
// (an <img> data URI that survives untrusted notebooks) by the interactive view.

import { render } from "./render.js";

function mount(root, data) {
  if (typeof root === "string") root = document.querySelector(`[data-nbc-root="${root}"]`);
  if (!root || root.getAttribute("data-nbc-mounted")) return null;
  root.setAttribute("data-nbc-mounted", "1");
  const target = root.querySelector("[data-nbc-mount]") || root;
  if (root.hasAttribute("data-nbc-standalone")) target.classList.add("nbc-standalone");
  const view = render(target, data, {});
  view.ready.then(() => {
    const fallback = root.querySelector("[data-nbc-fallback]");
    if (fallback) fallback.style.display = "none";
  }, () => {});
  return view;
}

window.nbcompileView = { render, mount };
