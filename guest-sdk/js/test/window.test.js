// Window functions run by a window of the host, driven with the calls it makes.
import assert from "node:assert/strict";
import { test } from "node:test";

import * as weir from "../src/index.js";
import { Harness, processCall, resultCall, updateCall } from "../src/testing.js";

const W = { start: 0, end: 1000 };
const text = (b) => new TextDecoder().decode(b);

// `<count>:<sum>` of a window's decimal values, as the Rust window-aggregate test guest.
class CountSum extends weir.AggregateFunction {
  create() {
    return [0, 0];
  }
  add(acc, value) {
    return [acc[0] + 1, acc[1] + Number(text(value))];
  }
  merge(acc, other) {
    return [acc[0] + other[0], acc[1] + other[1]];
  }
  result(acc) {
    return `${acc[0]}:${acc[1]}`;
  }
}

class Listing extends weir.ProcessWindowFunction {
  open(ctx) {
    this.prefix = ctx.config.prefix ?? "";
  }
  process(ctx, key, window, values) {
    ctx.emit(key, `${this.prefix}${window.start},${window.end},${values.map(text).join("+")}`);
  }
}

test("an aggregate folds values, merges sessions and gives its result", () => {
  const h = new Harness(weir.aggregate(CountSum));
  const [a] = h.process([["k", updateCall(W, [], ["2", "3"])]]);
  assert.deepEqual(weir.decode(a.value), [2, 5]);
  const [b] = h.process([["k", updateCall(W, [a.value], ["4"])]]);
  // Two sessions merged: both accumulators, then the new values.
  const [merged] = h.process([["k", updateCall(W, [a.value, b.value], ["1"])]]);
  assert.deepEqual(weir.decode(merged.value), [6, 15]);
  const [out] = h.process([["k", resultCall(W, merged.value)]]);
  assert.equal(out.valueStr, "6:15");
});

test("an accumulator of the Rust SDK reads the same", () => {
  // A Rust `(u64, u64)` accumulator is a CBOR array of two integers.
  const h = new Harness(weir.aggregate(CountSum));
  const [out] = h.process([["k", resultCall(W, new Uint8Array([0x82, 0x03, 0x18, 0x2a]))]]);
  assert.equal(out.valueStr, "3:42");
});

test("a process-window function gets the window and its values", () => {
  const h = new Harness(weir.processWindow(Listing), { config: { prefix: "v2:" } });
  const [out] = h.process([["k", processCall({ start: -1000, end: 0 }, ["a", "b"])]]);
  assert.equal(out.keyStr, "k");
  assert.equal(out.valueStr, "v2:-1000,0,a+b");
});

test("a function of the wrong kind says so", () => {
  const process = new Harness(weir.processWindow(Listing));
  assert.throws(() => process.process([["k", updateCall(W, [], ["1"])]]), /function = "aggregate"/);
  const agg = new Harness(weir.aggregate(CountSum));
  assert.throws(() => agg.process([["k", "not a window call"]]), /only a window of the host calls/);
});

test("only function classes are accepted", () => {
  assert.throws(() => weir.aggregate(Listing), /AggregateFunction subclass/);
  assert.throws(() => weir.processWindow(CountSum), /ProcessWindowFunction subclass/);
});

// Fails on every call, as a function with a bug would.
class FailingAggregate extends weir.AggregateFunction {
  create() {
    return 0;
  }
  add() {
    throw new Error("no adding today");
  }
  result() {
    throw new Error("no results today");
  }
}

class FailingProcess extends weir.ProcessWindowFunction {
  process() {
    throw new Error("no firing today");
  }
}

test("a failed call names the window, not the record", () => {
  const failed = (operator, call) => {
    const h = new Harness(operator);
    try {
      h.process([["bi", call]]);
    } catch (e) {
      return e.message;
    }
    assert.fail("the call did not fail");
  };
  const agg = weir.aggregate(FailingAggregate);
  assert.match(
    failed(agg, updateCall(W, [], ["1", "2"])),
    /^adding records to the window \[0, 1000\) of key "bi" with 2 records: Error: no adding today/,
  );
  assert.match(
    failed(agg, resultCall(W, weir.encode(0))),
    /^taking the result of the window \[0, 1000\) of key "bi": Error: no results today/,
  );
  assert.match(
    failed(weir.processWindow(FailingProcess), processCall(W, ["a"])),
    /^firing the window \[0, 1000\) of key "bi" with 1 record: Error: no firing today/,
  );
});
