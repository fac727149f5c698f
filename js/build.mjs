// Bundle js/ into nbcompile/widgets/static: widget.js (ESM, for anywidget) and
// nbcompile-view.js (IIFE defining window.nbcompileView, inlined in the static HTML).
// Run by hatch_build.py; `node js/build.mjs` by hand.

import { build, transform } from "esbuild";
import { readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import path from "node:path";

const root = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const out = path.join(root, "nbcompile", "widgets", "static");
// style.css is imported as text: minify it first (it is carried in every first output).
const minCss = {
  name: "min-css",
  setup(b) {
    b.onLoad({ filter: /\.css$/ }, async (args) => {
      const { code } = await transform(await readFile(args.path, "utf8"), { loader: "css", minify: true });
      return { contents: code, loader: "text" };
    });
  },
};
const common = { bundle: true, minify: true, target: ["es2020"], plugins: [minCss], legalComments: "none", logLevel: "warning" };

await build({ ...common, entryPoints: [path.join(root, "js", "widget.js")], format: "esm", outfile: path.join(out, "widget.js") });
await build({ ...common, entryPoints: [path.join(root, "js", "static.js")], format: "iife", outfile: path.join(out, "nbcompile-view.js") });
