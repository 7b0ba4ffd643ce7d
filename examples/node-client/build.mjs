// Bundles src/client.ts and the generated code it imports (../../gen/ts) into dist/client.mjs.
import * as esbuild from "esbuild";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
await esbuild.build({
  absWorkingDir: here,
  entryPoints: ["src/client.ts"],
  outfile: path.join(here, "dist", "client.mjs"),
  bundle: true,
  format: "esm",
  platform: "node",
  target: "node20",
  // ../../gen/ts imports @bufbuild/protobuf; it resolves from this directory's node_modules.
  nodePaths: [path.join(here, "node_modules")],
  tsconfigRaw: { compilerOptions: { verbatimModuleSyntax: true } },
  logLevel: "warning",
});
