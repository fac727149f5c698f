// Export of a drawn graph: SVG (styles inlined) and PNG downloads of exactly what is on screen.

/** The drawn graph of a GraphView as a standalone SVG document: computed styles inlined (so it
 * looks as on screen, highlights included), the whole graph at 100 %, on the canvas colour. */
export function exportSvg(gv) {
  const root = gv.boxes?.get("root");
  const m = 12;
  const clone = gv.svg.cloneNode(true);
  const props = ["fill", "fill-opacity", "stroke", "stroke-width", "stroke-opacity", "stroke-dasharray", "font-family", "font-size", "font-weight", "opacity"];
  const src = gv.svg.querySelectorAll("rect, path, text, circle, line");
  const dst = clone.querySelectorAll("rect, path, text, circle, line");
  const view = gv.el.ownerDocument.defaultView;
  src.forEach((el, i) => {
    const cs = view.getComputedStyle(el);
    dst[i].setAttribute("style", props.map((p) => `${p}:${cs.getPropertyValue(p)}`).join(";"));
  });
  const W = Math.ceil((root?.w || 0) + 2 * m), H = Math.ceil((root?.h || 0) + 2 * m);
  for (const [k, v] of Object.entries({ xmlns: "http://www.w3.org/2000/svg", width: W, height: H, viewBox: `0 0 ${W} ${H}` })) clone.setAttribute(k, v);
  clone.removeAttribute("class");
  clone.querySelector(".nbc-viewport").setAttribute("transform", `translate(${m},${m})`);
  const bg = gv.el.ownerDocument.createElementNS("http://www.w3.org/2000/svg", "rect");
  bg.setAttribute("width", W);
  bg.setAttribute("height", H);
  bg.setAttribute("fill", view.getComputedStyle(gv.el).backgroundColor || "#ffffff");
  clone.insertBefore(bg, clone.firstChild);
  return new XMLSerializer().serializeToString(clone);
}

/** The drawn graph as a PNG Blob (2x, at most 8000 px a side), via the SVG drawn on a canvas. */
export function exportPng(gv) {
  const text = exportSvg(gv);
  const doc = gv.el.ownerDocument;
  return new Promise((resolve, reject) => {
    const img = new Image();
    img.onload = () => {
      const scale = Math.min(2, 8000 / Math.max(img.width, img.height, 1));
      const canvas = doc.createElement("canvas");
      canvas.width = Math.max(1, Math.round(img.width * scale));
      canvas.height = Math.max(1, Math.round(img.height * scale));
      const ctx = canvas.getContext("2d");
      ctx.scale(scale, scale);
      ctx.drawImage(img, 0, 0);
      canvas.toBlob((blob) => (blob ? resolve(blob) : reject(new Error("PNG export failed"))), "image/png");
    };
    img.onerror = () => reject(new Error("PNG export: the SVG did not load"));
    img.src = "data:image/svg+xml;charset=utf-8," + encodeURIComponent(text);
  });
}
