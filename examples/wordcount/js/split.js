// Splits each line into words on ASCII whitespace; each word is emitted keyed by itself.
// `config = { lowercase = true }` lowercases the words first. The same operator as ../split
// (Rust) and ../python/split.py, with the same output.
import * as weir from "weir-sdk";

const ASCII_WHITESPACE = /[ \t\n\f\r]+/;

// Character by character, as Rust's char::to_lowercase: toLowerCase() on the whole word would
// turn a final capital sigma into ς.
const lower = (word) => (word.includes("Σ") ? Array.from(word, (c) => c.toLowerCase()).join("") : word.toLowerCase());

export default class Split extends weir.Operator {
  open(ctx) {
    const { lowercase = false, ...unknown } = ctx.config;
    if (Object.keys(unknown).length > 0) {
      throw new weir.WeirError(`unknown config keys ${Object.keys(unknown).join(", ")}; known: lowercase`);
    }
    if (typeof lowercase !== "boolean") {
      throw new weir.WeirError(`config: lowercase must be true or false, not ${JSON.stringify(lowercase)}`);
    }
    this.lowercase = lowercase;
  }

  process(ctx, line) {
    for (let word of line.valueStr().split(ASCII_WHITESPACE)) {
      if (!word) continue;
      if (this.lowercase) word = lower(word);
      ctx.emit(word, word);
    }
  }
}
