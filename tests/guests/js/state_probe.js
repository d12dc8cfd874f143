// Test guest: the state-probe command interpreter of tests/guests/state-probe (Rust) in
// JavaScript, so that the conformance script tests/conformance/state.txt checks the JS SDK
// against the host as it checks the Rust and Python SDKs (tests/e2e/state.rs). State: value
// "v", list "l", map "m", all of strings; the `t` commands' states have an event-time TTL of
// 1 s, as in the Rust probe.
import * as weir from "weir-sdk";

const TTL = new weir.Ttl(1000, { time: weir.TtlTime.EVENT_TIME });
const TTL_READ = new weir.Ttl(1000, { time: weir.TtlTime.EVENT_TIME, update: weir.UpdateType.ON_READ_AND_WRITE });
const sorted = (m) => `{${m.entries().sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([k, x]) => `${k}=${x}`).join(",")}}`;
const keyValue = (arg) => {
  const at = arg.indexOf(" ");
  return at < 0 ? [arg, ""] : [arg.slice(0, at), arg.slice(at + 1)];
};

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
    case "mput": m.put(...keyValue(arg)); break;
    case "mget": return m.get(arg, "none");
    case "mremove": m.remove(arg); break;
    case "mcontains": return String(m.has(arg));
    case "mentries": return sorted(m);
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
    case "tvset": ctx.valueState("tv", TTL).set(arg); break;
    case "tvget": return ctx.valueState("tv", TTL).get("none");
    case "trset": ctx.valueState("tr", TTL_READ).set(arg); break;
    case "trget": return ctx.valueState("tr", TTL_READ).get("none");
    case "tladd": ctx.listState("tl", TTL).add(arg); break;
    case "tlget": return list(ctx.listState("tl", TTL).get());
    case "tmput": ctx.mapState("tm", TTL).put(...keyValue(arg)); break;
    case "tmentries": return sorted(ctx.mapState("tm", TTL));
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
