// Decode a packed report with the front end's own decoder and print it as JSON (for the
// Python test that the two agree):  node js/tools/decode-dump.mjs packed.json > report.json
import { readFileSync } from "node:fs";
import { decodeReport } from "../model.js";

const [file] = process.argv.slice(2);
process.stdout.write(JSON.stringify(await decodeReport(JSON.parse(readFileSync(file, "utf8")))));
