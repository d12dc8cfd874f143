// Test guest: the process-window function of tests/guests/window-process (Rust) in
// JavaScript. A fired window of key `k` becomes the record `k`, `<start>,<end>,<count>:<sum>`
// of its records' values (decimal integers; a value that is not one adds its bytes).
// Config `{ fail = "error" }` fails every window it fires, as a function with a bug would.
import * as weir from "weir-sdk";

const text = new TextDecoder();

function number(value) {
  const s = text.decode(value).trim();
  if (/^[0-9]+$/.test(s)) return Number(s);
  return value.reduce((a, b) => a + b, 0);
}

class CountSum extends weir.ProcessWindowFunction {
  open(ctx) {
    this.fail = ctx.config.fail;
  }
  process(ctx, key, window, values) {
    if (this.fail) throw new Error("this window function fails");
    const total = values.reduce((a, v) => a + number(v), 0);
    ctx.emit(key, `${window.start},${window.end},${values.length}:${total}`);
  }
}

export default weir.processWindow(CountSum);
