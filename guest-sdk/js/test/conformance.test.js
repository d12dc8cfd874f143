// The state conformance script (tests/conformance/state.txt) through the JS SDK's harness
// and the JS state probe (tests/guests/js/state_probe.js); tests/e2e/state.rs runs the same
// probe through the host.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { Harness } from "weir-sdk/testing";
import StateProbe from "../../../tests/guests/js/state_probe.js";

const script = new URL("../../../tests/conformance/state.txt", import.meta.url);

function parse(text) {
  const scripts = [];
  const atEnd = [];
  let current = [];
  for (const line of text.split("\n")) {
    if (!line.trim()) {
      if (current.length) scripts.push(current);
      current = [];
      continue;
    }
    if (line.startsWith("#")) continue;
    const [key, command, ...rest] = line.split("\t");
    const expect = rest.join("\t");
    if (command === "@end") atEnd.push([key, expect]);
    else current.push([key, command, expect]);
  }
  if (current.length) scripts.push(current);
  return { scripts, atEnd };
}

for (const batch of [1, 7, 64, 100000]) {
  test(`the conformance script gives exact results in batches of ${batch}`, () => {
    const { scripts, atEnd } = parse(readFileSync(script, "utf8"));
    const steps = [];
    const rounds = Math.max(...scripts.map((s) => s.length));
    for (let round = 0; round < rounds; round++) for (const s of scripts) if (round < s.length) steps.push(s[round]);
    const h = new Harness(StateProbe);
    for (let start = 0; start < steps.length; start += batch) {
      const chunk = steps.slice(start, start + batch);
      const got = h.process(chunk.map(([key, command]) => [key, command])).map((o) => [o.keyStr, o.valueStr]);
      assert.deepEqual(got, chunk.map(([key, , expect]) => [key, expect]), `steps from ${start}`);
      if (start % (3 * batch) === 0) h.restart();
    }
    assert.deepEqual(h.fireEventTimersUpTo(2 ** 52).map((o) => [o.keyStr, o.valueStr]), atEnd);
  });
}
