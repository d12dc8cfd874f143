// Test guest: the state-probe command interpreter of tests/guests/state-probe (Rust) in
// JavaScript, so that the conformance script tests/conformance/state.txt checks the JS SDK
// against the host as it checks the Rust and Python SDKs (tests/e2e/state.rs). State: value
// "v", list "l", map "m", all of strings.
import * as weir from "weir-sdk";

const list = (items) => `[${items.join(",")}]`;
const elements = (arg) => (arg ? arg.split(",") : []);

function run(ctx, command) {
  const space = command.indexOf(" ");
  const cmd = space < 0 ? command : command.slice(0, space);
  const arg = space < 0 ? "" : command.slice(space + 1);
  const v = ctx.valueState("v");
  const l = ctx.listState("l");
  const m = ctx.mapState("m");
  switch (cmd) {
    case "vset": v.set(arg); break;
    case "vget": return v.get("none");
    case "vclear": v.clear(); break;
    case "ladd": l.add(arg); break;
    case "laddall": l.addAll(elements(arg)); break;
    case "lget": return list(l.get());
    case "lupdate": l.update(elements(arg)); break;
    case "lclear": l.clear(); break;
    case "mput": {
      const at = arg.indexOf(" ");
      if (at < 0) m.put(arg, "");
      else m.put(arg.slice(0, at), arg.slice(at + 1));
      break;
    }
    case "mget": return m.get(arg, "none");
    case "mremove": m.remove(arg); break;
    case "mcontains": return String(m.has(arg));
    case "mentries": return `{${m.entries().sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([k, x]) => `${k}=${x}`).join(",")}}`;
    case "mkeys": return list(m.keys().sort());
    case "mvalues": return list(m.values().sort());
    case "mfill":
    case "mremovefill": {
      const [n, len = "0"] = arg.split(" ");
      for (let i = 0; i < Number(n); i++) {
        if (cmd === "mfill") m.put(`f${i}`, String(i).padStart(Number(len), "."));
        else m.remove(`f${i}`);
      }
      break;
    }
    case "mvlen": {
      const value = m.get(arg);
      return value === null ? "none" : `${value.length} ${value.replace(/^\.+/, "")}`;
    }
    case "msize": return String(m.size());
    case "misempty": return String(m.isEmpty());
    case "mclear": m.clear(); break;
    case "timer": ctx.registerEventTimer(Number(arg)); break;
    default: throw new weir.WeirError(`unknown command ${JSON.stringify(cmd)}`);
  }
  return "ok";
}

export default class StateProbe extends weir.Operator {
  process(ctx, record) {
    ctx.emit(record.key, run(ctx, record.valueStr()));
  }
  onTimer(ctx, timer) {
    ctx.emit(timer.key, `fired ${timer.timestamp}`);
  }
}
