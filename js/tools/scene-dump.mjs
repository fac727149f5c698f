// Print the widget's first scene of each graph of a report as JSON (for the Python parity test):
//   node js/tools/scene-dump.mjs report.json [limit budget] > scene.json
import { readFileSync } from "node:fs";
import { prepareGraph } from "../model.js";
import { buildScene, initialExpansion } from "../scene.js";

const [file, limit = "60", budget = "400"] = process.argv.slice(2);
const report = JSON.parse(readFileSync(file, "utf8"));
const out = {};
for (const which of ["traced", "compiled", "gradient", "gradient_compiled"]) {
  const graph = report.graphs?.[which];
  if (!graph) continue;
  const pg = prepareGraph(graph, report);
  const scene = buildScene(pg, initialExpansion(pg, Number(limit), Number(budget), undefined, true, which === "gradient"));
  out[which] = {
    boxes: [...scene.boxes.values()].map((b) => [b.key, b.x, b.y, b.w, b.h, b.lines || null, b.title || null]),
    edges: scene.edges.map((e) => [e.u, e.v, e.count, e.up, e.points]),
  };
}
process.stdout.write(JSON.stringify(out));
