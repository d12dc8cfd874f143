// The JavaScript word count's operators, run natively with weir-sdk/testing (node --test).
import assert from "node:assert/strict";
import { test } from "node:test";

import * as weir from "weir-sdk";
import { Harness, Input } from "weir-sdk/testing";

import CountWords from "./count.js";
import Split from "./split.js";

const words = (out) => out.map((o) => [o.keyStr, o.valueStr]);

test("splits on ASCII whitespace", () => {
  const out = new Harness(Split).process(["To be,\tor  not\n", "", "   ", "to BE\x0bx"]);
  assert.deepEqual(words(out), [["To", "To"], ["be,", "be,"], ["or", "or"], ["not", "not"], ["to", "to"], ["BE\x0bx", "BE\x0bx"]]);
});

test("lowercase config", () => {
  const out = new Harness(Split, { config: { lowercase: true } }).process(["Hello WORLD Straße ΟΔΟΣ"]);
  assert.deepEqual(words(out), [["hello", "hello"], ["world", "world"], ["straße", "straße"], ["οδοσ", "οδοσ"]]);
});

test("rejects bad config and text that is not UTF-8", () => {
  assert.throws(() => new Harness(Split, { config: { lowercase: "yes" } }).process(["x"]), /lowercase must be true or false/);
  assert.throws(() => new Harness(Split).process([new Input(new Uint8Array([0xff, 0x20]))]), /TypeError/);
});

test("counts over two batches and a restart", () => {
  const h = new Harness(CountWords);
  const out = h.process([["to", "to"], ["be", "be"], ["to", "to"]]);
  assert.deepEqual(out.map((o) => [o.keyStr, o.valueStr, o.kind]), [
    ["to", "1", weir.Kind.INSERT],
    ["be", "1", weir.Kind.INSERT],
    ["to", "2", weir.Kind.UPDATE_AFTER],
  ]);
  h.restart();
  const again = h.process([new Input("be", { key: "be", timestamp: 7 })]);
  assert.deepEqual(again.map((o) => [o.valueStr, o.timestamp]), [["2", 7]]);
  assert.equal(h.valueState("count", "to"), 2);
});
