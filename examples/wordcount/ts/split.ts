// Splits each line into words on ASCII whitespace; each word is emitted keyed by itself.
// `config = { lowercase = true }` lowercases the words first. The same operator as
// ../js/split.js, in TypeScript: `weir build split.ts` bundles it (esbuild drops the types),
// `tsc -p .` checks them against weir-sdk's declarations.
import * as weir from "weir-sdk";

const ASCII_WHITESPACE = /[ \t\n\f\r]+/;

// Character by character, as Rust's char::to_lowercase: toLowerCase() on the whole word would
// turn a final capital sigma into ς.
const lower = (word: string): string =>
  word.includes("Σ") ? Array.from(word, (c) => c.toLowerCase()).join("") : word.toLowerCase();

export default class Split extends weir.Operator {
  private lowercase = false;

  override open(ctx: weir.OpenContext): void {
    const { lowercase = false, ...unknown } = ctx.config;
    if (Object.keys(unknown).length > 0) {
      throw new weir.WeirError(`unknown config keys ${Object.keys(unknown).join(", ")}; known: lowercase`);
    }
    if (typeof lowercase !== "boolean") {
      throw new weir.WeirError(`config: lowercase must be true or false, not ${JSON.stringify(lowercase)}`);
    }
    this.lowercase = lowercase;
  }

  override process(ctx: weir.Context, line: weir.Record): void {
    for (const word of line.valueStr().split(ASCII_WHITESPACE)) {
      if (!word) continue;
      const out = this.lowercase ? lower(word) : word;
      ctx.emit(out, out);
    }
  }
}
