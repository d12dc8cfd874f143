// The runtime through the harness: state of every kind against a model, timers, output,
// errors, operator state.
import assert from "node:assert/strict";
import { test } from "node:test";

import * as weir from "../src/index.js";
import { Harness, Input } from "../src/testing.js";

class Script extends weir.Operator {
  process(ctx, record) {
    const [op, ...args] = record.valueStr().split(" ");
    const key = ctx.currentKey;
    const v = ctx.valueState("v");
    const l = ctx.listState("l");
    const m = ctx.mapState("m");
    const show = (x) => ctx.emit(key, JSON.stringify(x));
    switch (op) {
      case "vset": return v.set(Number(args[0]));
      case "vget": return show(v.get());
      case "vclear": return v.clear();
      case "ladd": return l.add(Number(args[0]));
      case "lget": return show(l.get());
      case "lupdate": return l.update(args.map(Number));
      case "lclear": return l.clear();
      case "mput": return m.put(Number(args[0]), "v".repeat(Number(args[1])));
      case "mremove": return m.remove(Number(args[0]));
      case "mget": return show(m.get(Number(args[0])));
      case "mitems": return show(m.entries());
      case "mempty": return show(m.isEmpty());
      case "mclear": return m.clear();
      default: throw new Error(`unknown ${op}`);
    }
  }
}

class Model {
  constructor() {
    this.v = new Map();
    this.l = new Map();
    this.m = new Map();
  }
  apply(key, op, args) {
    if (!this.l.has(key)) this.l.set(key, []);
    if (!this.m.has(key)) this.m.set(key, new Map());
    const l = this.l.get(key);
    const m = this.m.get(key);
    switch (op) {
      case "vset": this.v.set(key, Number(args[0])); return null;
      case "vget": return JSON.stringify(this.v.get(key) ?? null);
      case "vclear": this.v.delete(key); return null;
      case "ladd": l.push(Number(args[0])); return null;
      case "lget": return JSON.stringify(l);
      case "lupdate": l.splice(0, l.length, ...args.map(Number)); return null;
      case "lclear": l.length = 0; return null;
      case "mput": m.set(Number(args[0]), "v".repeat(Number(args[1]))); return null;
      case "mremove": m.delete(Number(args[0])); return null;
      case "mget": return JSON.stringify(m.get(Number(args[0])) ?? null);
      case "mitems": return JSON.stringify([...m.entries()].sort((a, b) => a[0] - b[0]));
      case "mempty": return JSON.stringify(m.size === 0);
      case "mclear": m.clear(); return null;
    }
  }
}

// A small seeded generator (mulberry32), so failures repeat.
function rng(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

for (const big of [false, true]) {
  test(`state of every kind matches a model across batches and restarts (${big ? "large" : "small"} maps)`, () => {
    const random = rng(big ? 3 : 4);
    const below = (n) => Math.floor(random() * n);
    const h = new Harness(Script);
    const model = new Model();
    const ops = ["vset", "vget", "vclear", "ladd", "ladd", "lget", "lupdate", "lclear", "mput", "mput", "mput", "mput", "mremove", "mget", "mget", "mitems", "mempty"];
    for (let batch = 0; batch < 150; batch++) {
      const records = [];
      const want = [];
      for (let i = 1 + below(29); i > 0; i--) {
        const key = "abcde"[below(5)];
        const op = !big || random() >= 0.9 ? [...ops, "mclear"][below(ops.length + 1)] : ops[below(ops.length)];
        const k = String(below(40));
        const size = String(below(big ? 2000 : 20));
        const args = { vset: [k], ladd: [k], lupdate: Array.from({ length: below(4) }, () => String(below(9))), mput: [k, size], mremove: [k], mget: [k] }[op] ?? [];
        records.push([key, [op, ...args].join(" ")]);
        const out = model.apply(key, op, args);
        if (out !== null) want.push([key, out]);
      }
      const got = h.process(records).map((o) => [o.keyStr, o.valueStr]);
      assert.deepEqual(got, want, `batch ${batch}`);
      if (batch % 25 === 24) h.restart();
    }
    for (const key of "abcde") {
      assert.deepEqual(h.valueState("v", key), model.v.get(key) ?? null);
      assert.deepEqual(h.listState("l", key), model.l.get(key) ?? []);
      assert.deepEqual(h.mapState("m", key), [...(model.m.get(key) ?? new Map()).entries()].sort((a, b) => a[0] - b[0]));
    }
    if (big) assert.ok(h.backend.calls.mapGet > 50 && h.backend.calls.mapEntries > 20, JSON.stringify(h.backend.calls));
  });
}

test("a batch crosses to the host a bounded number of times", () => {
  class Counter extends weir.Operator {
    process(ctx, record) {
      const s = ctx.valueState("n");
      s.set(s.get(0) + 1);
      ctx.listState("seen").add(record.valueStr());
      ctx.emit(record.key, "x");
    }
  }
  const h = new Harness(Counter);
  h.process(Array.from({ length: 1000 }, (_, i) => [String(i % 7), String(i)]));
  assert.deepEqual(h.backend.calls, { load: 1, store: 2, mapGet: 0, mapEntries: 0, emit: 1 });
  assert.equal(h.valueState("n", "3"), 143);
  assert.deepEqual(h.listState("seen", "0").slice(0, 3), ["0", "7", "14"]);
});

test("timers fire in order once per key and time; delete and register is one change", () => {
  class Session extends weir.Operator {
    process(ctx, record) {
      const last = ctx.valueState("last");
      const previous = last.get();
      if (previous !== null) ctx.deleteEventTimer(previous + 100);
      last.set(record.timestamp);
      ctx.registerEventTimer(record.timestamp + 100);
      ctx.registerProcessingTimeTimer(1000);
    }
    onTimer(ctx, timer) {
      ctx.emit(timer.key, `${timer.domain} ${timer.timestamp}`);
      ctx.valueState("last").clear();
    }
  }
  const h = new Harness(Session);
  h.process([10, 20, 50].map((t) => new Input("", { key: "a", timestamp: t })));
  h.process([new Input("", { key: "b", timestamp: 5 })]);
  assert.deepEqual(h.eventTimers("a"), [150]);
  assert.deepEqual(h.fireEventTimersUpTo(140).map((o) => [o.keyStr, o.valueStr, o.timestamp]), [["b", "0 105", 105]]);
  assert.deepEqual(h.fireEventTimersUpTo(1000).map((o) => [o.keyStr, o.valueStr]), [["a", "0 150"]]);
  assert.equal(h.valueState("last", "a"), null);
  const fired = h.setProcessingTime(1000).map((o) => [o.keyStr, o.valueStr, o.timestamp]).sort();
  assert.deepEqual(fired, [["a", "1 1000", null], ["b", "1 1000", null]]);
});

test("a timer deleted by a callback of the same firing does not fire", () => {
  class Cancel extends weir.Operator {
    process(ctx, record) {
      for (const t of record.valueStr().split(" ")) ctx.registerEventTimer(Number(t));
    }
    onTimer(ctx, timer) {
      ctx.emit(timer.key, `${timer.timestamp}`);
      ctx.deleteEventTimer(200);
    }
  }
  const h = new Harness(Cancel);
  h.process([new Input("100 200", { key: "k" })]);
  // The timer at 100 deletes the one at 200, due in the same advance.
  assert.deepEqual(h.fireEventTimersUpTo(300).map((o) => o.valueStr), ["100"]);
  assert.deepEqual(h.eventTimers("k"), []);
});

test("output kinds, timestamps, side outputs and the second input", () => {
  class Route extends weir.Operator {
    process(ctx, record) {
      if (record.input === 1) ctx.emitTo("second", record.key, record.value);
      else if (record.valueStr() === "bad") ctx.emitTo("malformed", null, record.value);
      else {
        ctx.emit(record.key, record.value);
        ctx.emitRecord(weir.Kind.DELETE, "k", 7, 42);
      }
    }
  }
  const h = new Harness(Route);
  const out = h.process([new Input("ok", { key: "a", timestamp: 3 }), "bad"]);
  assert.deepEqual(out.map((o) => [o.sideOutput, o.kind, o.keyStr, o.timestamp, o.valueStr]), [
    [null, weir.Kind.INSERT, "a", 3, "ok"],
    [null, weir.Kind.DELETE, "k", 7, "42"],
    ["malformed", weir.Kind.INSERT, null, null, "bad"],
  ]);
  assert.deepEqual(h.processSecond([["x", "y"]]).map((o) => [o.sideOutput, o.keyStr, o.valueStr]), [["second", "x", "y"]]);
});

test("a failing hook names the record, the key and where", () => {
  class Fails extends weir.Operator {
    process(ctx, record) {
      if (record.valueStr() === "boom") throw new TypeError("cannot parse");
      ctx.emit(null, record.value);
    }
  }
  assert.throws(() => new Harness(Fails).process([["k1", "fine"], ["k2", "boom"]]), (e) => {
    assert.ok(e instanceof weir.WeirError);
    assert.match(e.message, /record 1 of the batch \(key "k2"\): TypeError: cannot parse \(at .*operators\.test\.js/);
    return true;
  });
});

test("keyed state needs a key, a name keeps its kind, the codec names what it cannot store", () => {
  class Unkeyed extends weir.Operator {
    process(ctx) {
      ctx.valueState("x").get();
    }
  }
  assert.throws(() => new Harness(Unkeyed).process(["v"]), /no current key.*key_by/);
  class Mixed extends weir.Operator {
    process(ctx) {
      ctx.valueState("s").set(1);
      ctx.listState("s").add(1);
    }
  }
  assert.throws(() => new Harness(Mixed).process([["k", "v"]]), /"s" is a value state; it cannot also be/);
  class Stores extends weir.Operator {
    process(ctx) {
      ctx.valueState("when").set(new Date());
    }
  }
  assert.throws(() => new Harness(Stores).process([["k", "v"]]), /state "when": cannot store a Date/);
});

test("operator state, config, logs and restart", () => {
  class Offsets extends weir.Operator {
    open(ctx) {
      this.prefix = ctx.config.prefix;
      this.total = ctx.operatorState("total");
      ctx.info(`subtask ${ctx.subtaskIndex} of ${ctx.parallelism}`);
    }
    process(ctx) {
      this.total.set(this.total.get(0) + 1);
      ctx.emit(null, `${this.prefix}${this.total.get()}`);
    }
    close(ctx) {
      ctx.emit(null, "closed");
    }
  }
  const h = new Harness(Offsets, { config: { prefix: "#" }, parallelism: 3, subtaskIndex: 2 });
  assert.deepEqual(h.process(["a", "b"]).map((o) => o.valueStr), ["#1", "#2"]);
  h.restart();
  assert.deepEqual(h.process(["c"]).map((o) => o.valueStr), ["#3"]);
  assert.equal(h.operatorState("total"), 3);
  assert.deepEqual(h.close().map((o) => o.valueStr), ["closed"]);
  assert.deepEqual(h.logs, [[weir.Level.INFO, "subtask 2 of 3"], [weir.Level.INFO, "subtask 2 of 3"]]);
});

test("a ttl is declared with the state", () => {
  class Declares extends weir.Operator {
    process(ctx) {
      ctx.valueState("recent", new weir.Ttl(5000, { update: weir.UpdateType.ON_READ_AND_WRITE })).set(1);
    }
  }
  const h = new Harness(Declares);
  h.process([["k", "v"]]);
  assert.equal(h.valueState("recent", "k"), 1);
  assert.throws(() => new weir.Ttl(0), /at least 1 ms/);
});

test("state declared in open acts on the current key in process and onTimer", () => {
  class Declared extends weir.Operator {
    open(ctx) {
      this.count = ctx.valueState("count");
      this.seen = ctx.listState("seen", new weir.Ttl(60000));
      this.byValue = ctx.mapState("byValue");
    }
    process(ctx, record) {
      const n = this.count.get(0) + 1;
      this.count.set(n);
      this.seen.add(record.valueStr());
      this.byValue.put(record.valueStr(), n);
      // The same state reached by name.
      assert.equal(ctx.valueState("count").get(), n);
      ctx.registerEventTimer(100);
    }
    onTimer(ctx, timer) {
      ctx.emit(timer.key, JSON.stringify([this.count.get(), this.seen.get(), this.byValue.entries()]));
    }
  }
  const h = new Harness(Declared);
  h.process([["a", "x"], ["b", "y"], ["a", "z"]]);
  h.restart(); // open runs again and declares the states of the new instance
  h.process([["b", "w"]]);
  assert.equal(h.valueState("count", "a"), 2);
  assert.equal(h.valueState("count", "b"), 2);
  const out = h.fireEventTimersUpTo(100).map((o) => [o.keyStr, o.valueStr]).sort();
  assert.deepEqual(out, [
    ["a", JSON.stringify([2, ["x", "z"], [["x", 1], ["z", 2]]])],
    ["b", JSON.stringify([2, ["y", "w"], [["w", 2], ["y", 1]]])],
  ]);
});

test("a state declared in open two ways fails open", () => {
  class Conflicting extends weir.Operator {
    open(ctx) {
      ctx.valueState("s");
      ctx.listState("s");
    }
  }
  assert.throws(() => new Harness(Conflicting).process([["k", "v"]]), /open.*"s" is a value state; it cannot also be/s);
});
