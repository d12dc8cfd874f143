// Test guest: the hostile guest of tests/guests/hostile (Rust) in JavaScript, for the
// commands that test the sandbox. Passes other records through.
//
//   spin         loops forever
//   hog          allocates 16 MiB after 16 MiB without end
//   fetch URL    fetches URL; emits "ok" or "err <error>" (built without componentize-js's
//                http feature, as `weir build` builds, a call traps)
//   globals      emits which of Node's or the web's ways out exist ("err none" if none)
import * as weir from "weir-sdk";

export default class Hostile extends weir.Operator {
  process(ctx, record) {
    const text = record.valueStr();
    const space = text.indexOf(" ");
    const command = space < 0 ? text : text.slice(0, space);
    const arg = space < 0 ? "" : text.slice(space + 1);
    switch (command) {
      case "spin":
        for (;;) {}
      case "hog": {
        const hoard = [];
        for (;;) hoard.push(new Uint8Array(16 << 20).fill(1));
      }
      case "fetch":
        if (typeof fetch !== "function") {
          ctx.emit(record.key, "err no fetch");
          return;
        }
        try {
          fetch(arg);
          ctx.emit(record.key, "ok");
        } catch (e) {
          ctx.emit(record.key, `err ${e}`);
        }
        return;
      case "globals": {
        const found = ["process", "require", "Deno", "XMLHttpRequest", "WebSocket"].filter((g) => typeof globalThis[g] !== "undefined");
        ctx.emit(record.key, found.length ? `ok ${found.join(",")}` : "err none");
        return;
      }
      default:
        ctx.emit(record.key, record.value);
    }
  }
}
