// Turns a line `<user> <page> [<time>]` into a record keyed by user with the page as value
// (and the time, if given, as its event time); other lines go unchanged to the side output
// `malformed`. The same operator as ../parse (Rust).
import * as weir from "weir-sdk";

export const MALFORMED = "malformed";
const utf8 = new TextDecoder("utf-8", { fatal: true });

// As Rust's i64 parse: an optional sign and ASCII digits, in range.
function i64(text) {
  if (!/^[+-]?[0-9]+$/.test(text)) return null;
  const n = BigInt(text);
  return n >= -(2n ** 63n) && n < 2n ** 63n ? Number(n) : null;
}

export default class ParseClicks extends weir.Operator {
  process(ctx, line) {
    let text = "";
    try {
      text = utf8.decode(line.value);
    } catch {}
    const fields = text.split(/[ \t\n\f\r]+/).filter((f) => f);
    if (fields.length === 2) ctx.emit(fields[0], fields[1]);
    else if (fields.length === 3 && i64(fields[2]) !== null) {
      ctx.emitRecord(weir.Kind.INSERT, fields[0], i64(fields[2]), fields[1]);
    } else ctx.emitTo(MALFORMED, null, line.value);
  }
}
