// Builds a JavaScript operator into a component (run by `weir build` with node, from the
// directory where it installed esbuild and componentize-js):
//
//   node build.mjs MODULE SDK_MODULES WIT_DIR OUT
//
// MODULE's default export is the operator class. An entry module exports the world's
// `operator` interface for it (weir-sdk/component); esbuild bundles the entry, the SDK (found
// in SDK_MODULES) and the module's own imports into one ES module, leaving the world's
// `weir:stream/...` imports to componentize-js, which makes the component.
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";

import { componentize } from "@bytecodealliance/componentize-js";
import { build } from "esbuild";

const [module, sdkModules, witDir, out] = process.argv.slice(2);
const dir = await mkdtemp(join(tmpdir(), "weir-build-"));
try {
  const entry = join(dir, "entry.js");
  await writeFile(
    entry,
    `import { exportOperator } from "weir-sdk/component";\n` +
      `import Operator from ${JSON.stringify(resolve(module))};\n` +
      `if (typeof Operator !== "function") {\n` +
      `  throw new Error(${JSON.stringify(`${module} has no default export of an operator class: end it with \`export default class MyOperator extends weir.Operator {...}\``)});\n` +
      `}\n` +
      `export const operator = exportOperator(Operator);\n`,
  );
  const bundled = join(dir, "bundled.js");
  // Every import of weir-sdk, the module's too, is this SDK: a copy the project installed
  // itself (for its tests) would be a second one, whose classes (`Ttl`...) the runtime's
  // `instanceof` checks would not recognise.
  const again = Symbol("weir-sdk");
  const oneSdk = {
    name: "one-weir-sdk",
    setup(b) {
      b.onResolve({ filter: /^weir-sdk(\/|$)/ }, (args) =>
        args.pluginData === again
          ? undefined
          : b.resolve(args.path, { kind: args.kind, resolveDir: dirname(sdkModules), pluginData: again }),
      );
    },
  };
  await build({
    entryPoints: [entry],
    bundle: true,
    format: "esm",
    platform: "neutral",
    outfile: bundled,
    external: ["weir:*"],
    nodePaths: [sdkModules],
    plugins: [oneSdk],
    logLevel: "error",
  });
  const { component } = await componentize({
    sourcePath: bundled,
    witPath: witDir,
    worldName: "processor",
    // No fetch: an operator reaches nothing outside its sandbox.
    disableFeatures: ["http", "fetch-event"],
  });
  await writeFile(out, component);
} finally {
  await rm(dir, { recursive: true, force: true });
}
