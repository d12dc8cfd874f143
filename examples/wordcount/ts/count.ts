// Counts each word (the record's key) in a value state and emits the new count: an insert for
// a word's first occurrence, an update after that. The same operator as ../js/count.js, in
// TypeScript, with the state's type declared: it reads and writes the other languages' state.
import * as weir from "weir-sdk";

export default class CountWords extends weir.Operator {
  private count!: weir.ValueState<number>;

  override open(ctx: weir.OpenContext): void {
    // Declared once; in process the handle acts on the current record's key.
    this.count = ctx.valueState<number>("count");
  }

  override process(ctx: weir.Context, word: weir.Record): void {
    const n = (this.count.get(0) ?? 0) + 1;
    this.count.set(n);
    ctx.emitRecord(n === 1 ? weir.Kind.INSERT : weir.Kind.UPDATE_AFTER, word.key, word.timestamp, n);
  }
}
