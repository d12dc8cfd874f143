// Window functions: user code for a window of the host (`wasm` and `window` on one operator,
// with `function = "aggregate"` or `"process"`), as weir_sdk::window in Rust.
//
// The host assigns records to windows, keeps them in the job's state backend, fires the
// windows as the watermark (or the clock) passes their end and merges sessions; the function
// only folds or reads a window's values. The module's default export is
// `weir.aggregate(MyAggregate)` (or `weir.processWindow(MyFunction)`).
//
// Calls (weir_wire::window): `u8 op, s64 start, s64 end`, then for op 0 (update) `u32 n,
// n × bytes` accumulators and `u32 m, m × bytes` values; op 1 (result) `bytes` accumulator;
// op 2 (process) `u32 m, m × bytes` values.

import { decode, encode } from "./cbor.js";
import { describeKey } from "./runtime.js";
import { Operator, WeirError } from "./types.js";
import * as w from "./wire.js";

const UPDATE = 0;
const RESULT = 1;
const PROCESS = 2;

/** Folds a window's records into an accumulator the host keeps (Flink's AggregateFunction). */
export class AggregateFunction {
  /** Called once before the first window, as Operator.open (to read `ctx.config`, say). */
  open(ctx) {}
  /** A new window's accumulator. */
  create() {
    throw new WeirError(`${this.constructor.name} must define create()`);
  }
  /** The accumulator with the record value `value` (a Uint8Array) added. */
  add(acc, value) {
    throw new WeirError(`${this.constructor.name} must define add(acc, value)`);
  }
  /** Two sessions' accumulators made one (session windows only). */
  merge(acc, other) {
    throw new WeirError(`${this.constructor.name} must define merge(acc, other) for session windows`);
  }
  /** The window's result, written as a built-in aggregate's: `<start>,<end>,<result>`. */
  result(acc) {
    throw new WeirError(`${this.constructor.name} must define result(acc)`);
  }
}

/** Gets all of a window's values when it fires (Flink's ProcessWindowFunction). */
export class ProcessWindowFunction {
  /** Called once before the first window, as Operator.open. */
  open(ctx) {}
  /**
   * The window `{ start, end }` of `key` (a Uint8Array) fired with its records' values (an
   * array of Uint8Array, in arrival order); what this emits goes out with the window's last
   * millisecond as timestamp.
   */
  process(ctx, key, window, values) {
    throw new WeirError(`${this.constructor.name} must define process(ctx, key, window, values)`);
  }
}

function contract(what) {
  return new WeirError(
    `${what}: this component is a window function, which only a window of the host calls ` +
      "(wasm and window on one operator)",
  );
}

function items(r) {
  const n = r.u32();
  const out = [];
  for (let i = 0; i < n; i++) out.push(r.bytes());
  return out;
}

/** `{ op, window, first, values }` of a window call. */
function readCall(b) {
  const r = new w.Reader(b);
  try {
    const op = r.u8();
    const window = { start: r.i64(), end: r.i64() };
    switch (op) {
      case UPDATE: {
        const accs = items(r);
        return { op, window, first: accs, values: items(r) };
      }
      case RESULT:
        return { op, window, first: r.bytes(), values: null };
      case PROCESS:
        return { op, window, first: null, values: items(r) };
      default:
        throw contract(`a window call of unknown kind ${op}`);
    }
  } catch (e) {
    if (e instanceof w.MalformedBuffer) throw contract(`a record that is not a window call (${e.message})`);
    throw e;
  }
}

/** A window call, for an error message: "firing the window [0, 1000) of key "k" with 4
 * records" (the record's index in the batch would say nothing to the function's author). */
function describeCall(index, key, value) {
  let call;
  try {
    call = readCall(value);
  } catch {
    return `window call ${index} of the batch`;
  }
  const [what, n] = {
    [UPDATE]: ["adding records to", call.values?.length],
    [RESULT]: ["taking the result of", 0],
    [PROCESS]: ["firing", call.values?.length],
  }[call.op];
  const of = key === null ? "" : ` of ${describeKey(key)}`;
  const records = n === 0 ? "" : n === 1 ? " with 1 record" : ` with ${n} records`;
  return `${what} the window [${call.window.start}, ${call.window.end})${of}${records}`;
}

/** What the two window operators share: their function (the subclass's static
 * `functionClass`), made and opened in `open`, and failures named by their window. */
class WindowOperator extends Operator {
  open(ctx) {
    this.function = new this.constructor.functionClass();
    this.function.open(ctx);
  }
  describeInput(index, key, value) {
    return describeCall(index, key, value);
  }
}

/** The operator that runs `functionClass` (an AggregateFunction) for a window of the host. */
export function aggregate(functionClass) {
  if (!(functionClass?.prototype instanceof AggregateFunction)) {
    throw new TypeError(`weir.aggregate takes an AggregateFunction subclass, not ${functionClass}`);
  }
  return class Aggregate extends WindowOperator {
    static functionClass = functionClass;
    process(ctx, record) {
      const f = this.function;
      const call = readCall(record.value);
      if (call.op === UPDATE) {
        let acc;
        let none = true;
        for (const a of call.first) {
          const other = decode(a);
          acc = none ? other : f.merge(acc, other);
          none = false;
        }
        if (none) acc = f.create();
        for (const v of call.values) acc = f.add(acc, v);
        ctx.emit(null, encode(acc));
      } else if (call.op === RESULT) {
        ctx.emit(null, f.result(decode(call.first)));
      } else {
        throw contract(
          'the window asked for a process-window function (function = "process"), but this ' +
            "component exports an aggregate",
        );
      }
    }
  };
}

/** The operator that runs `functionClass` (a ProcessWindowFunction) for a window of the host. */
export function processWindow(functionClass) {
  if (!(functionClass?.prototype instanceof ProcessWindowFunction)) {
    throw new TypeError(`weir.processWindow takes a ProcessWindowFunction subclass, not ${functionClass}`);
  }
  return class ProcessWindow extends WindowOperator {
    static functionClass = functionClass;
    process(ctx, record) {
      const call = readCall(record.value);
      if (call.op !== PROCESS) {
        throw contract(
          'the window asked for an aggregate function (function = "aggregate"), but this ' +
            "component exports a process-window function",
        );
      }
      this.function.process(ctx, record.key ?? new Uint8Array(), call.window, call.values);
    }
  };
}

function head(b, op, window) {
  b.u8(op);
  b.i64(window.start);
  b.i64(window.end);
}

const utf8 = new TextEncoder();

function list(b, values) {
  b.u32(values.length);
  for (const v of values) b.bytes(typeof v === "string" ? utf8.encode(v) : v);
}

/** A window call as the host makes it (for tests): merge `accs` (encoded), add `values`. */
export function updateCall(window, accs, values) {
  const b = new w.Writer();
  head(b, UPDATE, window);
  list(b, accs);
  list(b, values);
  return b.finish();
}

/** A window call asking for the result of the encoded accumulator `acc` (for tests). */
export function resultCall(window, acc) {
  const b = new w.Writer();
  head(b, RESULT, window);
  b.bytes(acc);
  return b.finish();
}

/** A window call firing `window` with `values` (for tests). */
export function processCall(window, values) {
  const b = new w.Writer();
  head(b, PROCESS, window);
  list(b, values);
  return b.finish();
}
