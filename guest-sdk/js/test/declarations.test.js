// The TypeScript declarations (index.d.ts, testing.d.ts) declare what the modules export,
// no more and no less: an export without a declaration is missing for TypeScript users, a
// declaration without an export compiles and fails when it runs. (`cargo xtask test`
// type-checks examples/wordcount/ts against the declarations with tsc.)
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

const declared = (file) => {
  const text = readFileSync(new URL(`../${file}`, import.meta.url), "utf8");
  const names = [...text.matchAll(/^export (?:declare )?(?:class|function|const|let) (\w+)/gm)];
  return names.map((m) => m[1]).sort();
};

for (const [file, module] of [
  ["index.d.ts", "../src/index.js"],
  ["testing.d.ts", "../src/testing.js"],
]) {
  test(`${file} declares every export of ${module.slice(3)}`, async () => {
    const exported = Object.keys(await import(module)).filter((name) => name !== "default");
    assert.deepEqual(declared(file), exported.sort());
  });
}
