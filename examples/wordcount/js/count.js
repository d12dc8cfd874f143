// Counts each word (the record's key) in a value state and emits the new count: an insert for
// a word's first occurrence, an update after that. The same operator as ../count (Rust) and
// ../python/count.py: they read and write each other's state.
import * as weir from "weir-sdk";

export default class CountWords extends weir.Operator {
  open(ctx) {
    // Declared once; in process the handle acts on the current record's key.
    this.count = ctx.valueState("count");
  }
  process(ctx, word) {
    const n = this.count.get(0) + 1;
    this.count.set(n);
    ctx.emitRecord(n === 1 ? weir.Kind.INSERT : weir.Kind.UPDATE_AFTER, word.key, word.timestamp, n);
  }
}
