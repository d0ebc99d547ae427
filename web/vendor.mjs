// Copies the page's libraries from node_modules into coach/service/page/vendor/ (git-ignored, in the wheel through
// pyproject's package-data), with their licences: the server serves them itself, so the page and the API docs work
// offline and nothing loads from a CDN. Run by `make web` after `npm ci`.
import { copyFileSync, mkdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const target = join(here, "..", "coach", "service", "page", "vendor");
const FILES = {
  "uplot/dist/uPlot.iife.min.js": "uPlot.iife.min.js",
  "uplot/dist/uPlot.min.css": "uPlot.min.css",
  "uplot/LICENSE": "uPlot.LICENSE.txt",
  "swagger-ui-dist/swagger-ui-bundle.js": "swagger-ui-bundle.js",
  "swagger-ui-dist/swagger-ui.css": "swagger-ui.css",
  "swagger-ui-dist/LICENSE": "swagger-ui.LICENSE.txt",
  "swagger-ui-dist/NOTICE": "swagger-ui.NOTICE.txt",
};

rmSync(target, { recursive: true, force: true });
mkdirSync(target, { recursive: true });
for (const [from, to] of Object.entries(FILES)) copyFileSync(join(here, "node_modules", from), join(target, to));
console.log(`web: ${Object.keys(FILES).length} files in ${target}`);
