// Bundles the console into web/dist: one JS and one CSS file named by content hash, and index.html
// pointing at them. Everything is bundled (the browser may have no internet); the output depends
// only on the sources and package-lock.json, so two builds are byte-identical.
import * as esbuild from "esbuild";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const dist = path.join(here, "dist");

await rm(dist, { recursive: true, force: true });
await mkdir(dist, { recursive: true });

const result = await esbuild.build({
  absWorkingDir: here,
  entryPoints: { app: "src/main.ts" },
  outdir: dist,
  entryNames: "[name]-[hash]",
  bundle: true,
  minify: true,
  format: "esm",
  target: "es2022",
  platform: "browser",
  sourcemap: false,
  legalComments: "none",
  // ../gen/ts imports @bufbuild/protobuf; it resolves from web/node_modules.
  nodePaths: [path.join(here, "node_modules")],
  // tsconfig.json's `paths` point at .d.ts files for tsc; the bundler must not use them.
  tsconfigRaw: { compilerOptions: { useDefineForClassFields: true, verbatimModuleSyntax: true } },
  metafile: true,
  logLevel: "warning",
});

const outputs = Object.keys(result.metafile.outputs).map((p) => path.basename(p));
const js = outputs.find((f) => f.endsWith(".js"));
const css = outputs.find((f) => f.endsWith(".css"));
if (!js || !css) throw new Error(`build produced ${outputs.join(", ")}; wanted one .js and one .css`);

const html = (await readFile(path.join(here, "src", "index.html"), "utf8"))
  .replace("%APP_JS%", js)
  .replace("%APP_CSS%", css);
await writeFile(path.join(dist, "index.html"), html);

for (const [file, info] of Object.entries(result.metafile.outputs)) {
  console.log(`${path.relative(here, file)}  ${(info.bytes / 1024).toFixed(1)} KiB`);
}
