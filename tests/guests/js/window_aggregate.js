// Test guest: the window aggregate function of tests/guests/window-aggregate (Rust) in
// JavaScript. A window's result is `<count>:<sum>` of its records' values (decimal integers);
// accumulators merge, so it serves session windows.
import * as weir from "weir-sdk";

class CountSum extends weir.AggregateFunction {
  create() {
    return [0, 0];
  }
  add(acc, value) {
    return [acc[0] + 1, acc[1] + Number(new TextDecoder().decode(value).trim())];
  }
  merge(acc, other) {
    return [acc[0] + other[0], acc[1] + other[1]];
  }
  result(acc) {
    return `${acc[0]}:${acc[1]}`;
  }
}

export default weir.aggregate(CountSum);
