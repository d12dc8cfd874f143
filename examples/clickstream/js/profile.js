// Per user, a map of visits per page and a list of the last three pages; on every click emits
// `top=<page>:<visits> distinct=<pages> recent=<last three>` (ties for top go to the smallest
// page). The same operator as ../profile (Rust).
import * as weir from "weir-sdk";

const RECENT = 3;

// Strings in code point order, as Rust and Python compare them.
function compare(a, b) {
  const x = Array.from(a, (c) => c.codePointAt(0));
  const y = Array.from(b, (c) => c.codePointAt(0));
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i] - y[i];
  return x.length - y.length;
}

export default class Profile extends weir.Operator {
  process(ctx, click) {
    const page = click.valueStr();
    const visits = ctx.mapState("visits");
    const n = visits.get(page, 0) + 1;
    visits.put(page, n);
    const counts = visits.entries();
    let [top, topN] = counts[0];
    for (const [p, c] of counts) if (c > topN || (c === topN && compare(p, top) < 0)) [top, topN] = [p, c];

    const recent = ctx.listState("recent");
    recent.add(page);
    let pages = recent.get();
    if (pages.length > RECENT) {
      pages = pages.slice(-RECENT);
      recent.update(pages);
    }
    ctx.emit(click.key, `top=${top}:${topN} distinct=${counts.length} recent=${pages.join(",")}`);
  }
}
