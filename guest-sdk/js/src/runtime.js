// One operator instance: decodes what the host sends, runs the operator's hooks, and sends
// back state changes, timer changes and output, once per batch.
//
// The component glue (component.js) and the test harness (testing.js) both drive an
// Instance; only the backend differs. Keyed state is "state in, diff out" per batch (see
// wit/stream.wit): the first read of a state in a batch loads it for every key of the batch in
// one call, reads and writes then hit a cache here, and each changed state goes back in one
// store call at the end of the batch.

import { CodecError, decode, encode } from "./cbor.js";
import * as w from "./wire.js";
import { Kind, Level, Record, Redistribution, StateError, Timer, Ttl, WeirError } from "./types.js";

export const OUTPUT_FLUSH_BYTES = 64 * 1024;
export const VALUE = "value";
export const LIST = "list";
export const MAP = "map";
const REMOVED = Symbol("removed");

const utf8 = new TextEncoder();
const lossy = new TextDecoder();

/** Bytes as a string of one char per byte: a Map key that sorts as the bytes do. */
export function byteKey(b) {
  let s = "";
  for (let i = 0; i < b.length; i++) s += String.fromCharCode(b[i]);
  return s;
}

export function describeKey(key) {
  if (key === null) return "without key";
  const text = lossy.decode(key);
  const short = text.slice(0, 64);
  return `key ${JSON.stringify(short)}${short.length < text.length ? "…" : ""}`;
}

/** What a failure in `process` names as the record it was at (a window function's operator
 * names the window instead: its `describeInput`). */
function describeRecord(index, key) {
  return `record ${index} of the batch (${describeKey(key)})`;
}

function where(e) {
  const frame = (e?.stack ?? "").split("\n").find((l) => /:\d+:\d+\)?$/.test(l.trim()));
  return frame ? ` (at ${frame.trim().replace(/^at /, "")})` : "";
}

/** The message the host gets for error `e` thrown while handling `what`. */
export function failure(e, what) {
  if (e instanceof WeirError) return `${what}: ${e.message}`;
  if (e instanceof Error) return `${what}: ${e.name}: ${e.message}${where(e)}`;
  return `${what}: ${String(e)}`;
}

function asBytes(v, what) {
  if (v instanceof Uint8Array) return v;
  if (ArrayBuffer.isView(v)) return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
  if (typeof v === "string") return utf8.encode(v);
  throw new TypeError(`${what} must be a Uint8Array or a string, not ${typeof v}`);
}

function valueBytes(v) {
  if (v instanceof Uint8Array) return v;
  if (ArrayBuffer.isView(v)) return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
  return utf8.encode(typeof v === "string" ? v : String(v));
}

class Entry {
  constructor(name, kind, ttl, handle) {
    this.name = name;
    this.kind = kind;
    this.ttl = ttl;
    this.handle = handle;
    this.epoch = -1;
    this.loaded = null;
    this.changes = new Map();
    this.fetched = new Map();
  }
}

function sameTtl(a, b) {
  return a === b || (a instanceof Ttl && a.equals(b));
}

export class Core {
  constructor(backend) {
    this.backend = backend;
    this.states = new Map();
    this.operatorStates = new Map();
    this.epoch = 0;
    this.keys = [];
    this.out = new w.Writer();
    this.timerOps = new Map();
  }

  begin(keys) {
    this.epoch += 1;
    this.keys = keys;
    this.out.clear();
    this.timerOps.clear();
  }

  entry(name, kind, ttl) {
    let e = this.states.get(name);
    if (e === undefined) {
      e = new Entry(name, kind, ttl, this.backend.declareState(kind, name, ttl));
      this.states.set(name, e);
    } else if (e.kind !== kind) {
      throw new StateError(
        `state ${JSON.stringify(name)} is a ${e.kind} state; it cannot also be used as a ${kind} state (give the new one another name)`,
      );
    } else if (!sameTtl(e.ttl, ttl)) {
      throw new StateError(`state ${JSON.stringify(name)} was declared with another ttl; declare it the same way everywhere`);
    }
    if (e.epoch !== this.epoch) {
      e.epoch = this.epoch;
      e.loaded = null;
      e.changes = new Map();
      e.fetched = new Map();
    }
    return e;
  }

  load(e) {
    const buf = this.backend.load(e.handle, this.keys);
    const r = new w.Reader(buf);
    const loaded = [];
    try {
      for (let i = 0; i < this.keys.length; i++) {
        if (e.kind === VALUE) loaded.push(r.optBytes());
        else if (e.kind === LIST) {
          const n = r.u32();
          const items = [];
          for (let j = 0; j < n; j++) items.push(r.bytes());
          loaded.push(items);
        } else loaded.push(readMap(r, true));
      }
      r.end(`${e.kind}-state load`);
    } catch (x) {
      throw new w.MalformedBuffer(`state ${JSON.stringify(e.name)}: the host sent a malformed load: ${x.message}`);
    }
    e.loaded = loaded;
    return loaded;
  }

  timer(op, slot, timestamp, domain) {
    this.timerOps.set(`${slot}/${domain}/${timestamp}`, [op, slot, timestamp]);
  }

  emit(sideOutput, kind, key, timestamp, value) {
    w.putOutput(this.out, sideOutput, kind, key, timestamp, value);
    if (this.out.len > OUTPUT_FLUSH_BYTES) {
      this.backend.emit(this.out.finish());
      this.out.clear();
    }
  }

  finish() {
    for (const e of this.states.values()) {
      if (e.epoch === this.epoch && e.changes.size > 0) {
        this.backend.store(e.handle, this.keys, changes(e));
      }
    }
    if (this.timerOps.size > 0) {
      const b = new w.Writer();
      for (const [op, slot, ts] of this.timerOps.values()) {
        b.u8(op);
        b.u32(slot);
        b.i64(ts);
      }
      this.timerOps.clear();
      this.backend.updateTimers(this.keys, b.finish());
    }
    if (this.out.len > 0) {
      this.backend.emit(this.out.finish());
      this.out.clear();
    }
  }
}

/** A map of a load: a Map from byteKey to [key bytes, value bytes], or LARGE's lower bound. */
function readMap(r, allowLarge) {
  const n = r.u32();
  if (n === w.LARGE && allowLarge) return r.u32();
  const entries = new Map();
  for (let i = 0; i < n; i++) {
    const k = r.bytes();
    entries.set(byteKey(k), [k, r.bytes()]);
  }
  return entries;
}

function changes(e) {
  const b = new w.Writer();
  if (e.kind === VALUE) {
    for (const [slot, v] of e.changes) {
      b.u32(slot);
      if (v === null) b.u8(w.CLEAR);
      else {
        b.u8(w.VALUE_SET);
        b.bytes(v);
      }
    }
  } else if (e.kind === LIST) {
    for (const [slot, { replaced, items }] of e.changes) {
      if (replaced && items.length === 0) {
        b.u32(slot);
        b.u8(w.CLEAR);
      } else if (items.length > 0) {
        b.u32(slot);
        b.u8(replaced ? w.LIST_REPLACE : w.LIST_APPEND);
        b.u32(items.length);
        for (const item of items) b.bytes(item);
      }
    }
  } else {
    for (const [slot, { cleared, overlay }] of e.changes) {
      if (cleared) {
        b.u32(slot);
        b.u8(w.CLEAR);
      }
      for (const [k, v] of overlay.values()) {
        if (v === REMOVED) {
          if (!cleared) {
            b.u32(slot);
            b.u8(w.MAP_REMOVE);
            b.bytes(k);
          }
        } else {
          b.u32(slot);
          b.u8(w.MAP_PUT);
          b.bytes(k);
          b.bytes(v);
        }
      }
    }
  }
  return b.finish();
}

function decodeState(e, data) {
  try {
    return decode(data);
  } catch (x) {
    if (x instanceof CodecError) {
      throw new StateError(`state ${JSON.stringify(e.name)} holds a value this SDK cannot read (${x.message}); was it written with another codec?`);
    }
    throw x;
  }
}

function encodeState(e, value) {
  try {
    return encode(value);
  } catch (x) {
    if (x instanceof CodecError) throw new StateError(`state ${JSON.stringify(e.name)}: ${x.message}`);
    throw x;
  }
}

class Keyed {
  constructor(ctx, name, ttl) {
    this.ctx = ctx;
    this.name = name;
    this.ttl = ttl;
  }
  at() {
    const slot = this.ctx.slot;
    if (slot === null) {
      throw new StateError(
        `${this.constructor.kind} state ${JSON.stringify(this.name)} is keyed, but there is no current key: key the stream (edge = "key_by") before this operator, and use keyed state in process and onTimer only`,
      );
    }
    return [this.ctx.core.entry(this.name, this.constructor.kind, this.ttl), slot];
  }
  loaded(e) {
    return e.loaded ?? this.ctx.core.load(e);
  }
}

/** One value per key (Flink's ValueState). */
export class ValueState extends Keyed {
  static kind = VALUE;
  /** The current key's value, or `fallback` if it has none. */
  get(fallback = null) {
    const [e, slot] = this.at();
    const data = e.changes.has(slot) ? e.changes.get(slot) : this.loaded(e)[slot];
    return data === null ? fallback : decodeState(e, data);
  }
  set(value) {
    const [e, slot] = this.at();
    e.changes.set(slot, encodeState(e, value));
  }
  clear() {
    const [e, slot] = this.at();
    e.changes.set(slot, null);
  }
}

/** A list per key (Flink's ListState); add() does not read the list. */
export class ListState extends Keyed {
  static kind = LIST;
  get() {
    const [e, slot] = this.at();
    const change = e.changes.get(slot);
    let items;
    if (change?.replaced) items = change.items;
    else {
      const stored = this.loaded(e)[slot];
      items = change ? stored.concat(change.items) : stored;
    }
    return items.map((i) => decodeState(e, i));
  }
  add(value) {
    const [e, slot] = this.at();
    const data = encodeState(e, value);
    const change = e.changes.get(slot);
    if (change) change.items.push(data);
    else e.changes.set(slot, { replaced: false, items: [data] });
  }
  addAll(values) {
    for (const v of values) this.add(v);
  }
  update(values) {
    const [e, slot] = this.at();
    e.changes.set(slot, { replaced: true, items: Array.from(values, (v) => encodeState(e, v)) });
  }
  clear() {
    const [e, slot] = this.at();
    e.changes.set(slot, { replaced: true, items: [] });
  }
}

/** A map per key (Flink's MapState). Reading one entry of a large map costs one host call
 * for that entry, not a copy of the map. Entries come in the order of their keys' encoding. */
export class MapState extends Keyed {
  static kind = MAP;
  overlay(e, slot) {
    let change = e.changes.get(slot);
    if (!change) {
      change = { cleared: false, overlay: new Map() };
      e.changes.set(slot, change);
    }
    return change.overlay;
  }
  stored(e, slot, k, bk) {
    const entries = this.loaded(e)[slot];
    if (entries instanceof Map) return entries.get(bk)?.[1] ?? null;
    let fetched = e.fetched.get(slot);
    if (!fetched) {
      fetched = new Map();
      e.fetched.set(slot, fetched);
    }
    if (!fetched.has(bk)) {
      const core = this.ctx.core;
      fetched.set(bk, core.backend.mapGet(e.handle, core.keys, slot, k));
    }
    return fetched.get(bk);
  }
  raw(e, slot, k) {
    const bk = byteKey(k);
    const change = e.changes.get(slot);
    if (change) {
      const v = change.overlay.get(bk);
      if (v !== undefined) return v[1] === REMOVED ? null : v[1];
      if (change.cleared) return null;
    }
    return this.stored(e, slot, k, bk);
  }
  get(key, fallback = null) {
    const [e, slot] = this.at();
    const v = this.raw(e, slot, encodeState(e, key));
    return v === null ? fallback : decodeState(e, v);
  }
  has(key) {
    const [e, slot] = this.at();
    return this.raw(e, slot, encodeState(e, key)) !== null;
  }
  put(key, value) {
    const [e, slot] = this.at();
    const k = encodeState(e, key);
    this.overlay(e, slot).set(byteKey(k), [k, encodeState(e, value)]);
  }
  putAll(entries) {
    const pairs = entries instanceof Map ? entries : Object.entries(entries);
    for (const [k, v] of pairs) this.put(k, v);
  }
  remove(key) {
    const [e, slot] = this.at();
    const k = encodeState(e, key);
    this.overlay(e, slot).set(byteKey(k), [k, REMOVED]);
  }
  clear() {
    const [e, slot] = this.at();
    e.changes.set(slot, { cleared: true, overlay: new Map() });
  }
  visible() {
    const [e, slot] = this.at();
    const change = e.changes.get(slot);
    const merged = new Map();
    if (!change?.cleared) {
      const loaded = this.loaded(e);
      let stored = loaded[slot];
      if (!(stored instanceof Map)) {
        const core = this.ctx.core;
        const r = new w.Reader(core.backend.mapEntries(e.handle, core.keys, slot));
        stored = readMap(r, false);
        r.end("map-state entries");
        loaded[slot] = stored;
      }
      for (const [bk, kv] of stored) merged.set(bk, kv);
    }
    if (change) {
      for (const [bk, kv] of change.overlay) {
        if (kv[1] === REMOVED) merged.delete(bk);
        else merged.set(bk, kv);
      }
    }
    const keys = Array.from(merged.keys()).sort();
    return [e, keys.map((bk) => merged.get(bk))];
  }
  /** The current key's [key, value] pairs, in key order. */
  entries() {
    const [e, entries] = this.visible();
    return entries.map(([k, v]) => [decodeState(e, k), decodeState(e, v)]);
  }
  keys() {
    const [e, entries] = this.visible();
    return entries.map(([k]) => decodeState(e, k));
  }
  values() {
    const [e, entries] = this.visible();
    return entries.map(([, v]) => decodeState(e, v));
  }
  size() {
    return this.visible()[1].length;
  }
  isEmpty() {
    const [e, slot] = this.at();
    const change = e.changes.get(slot);
    if (change) {
      for (const [, v] of change.overlay.values()) if (v !== REMOVED) return false;
      if (change.cleared) return true;
    }
    return this.visible()[1].length === 0;
  }
}

class OperatorStateBase {
  constructor(core, name, mode) {
    this.core = core;
    this.name = name;
    const known = core.operatorStates.get(name);
    if (!known) {
      this.handle = core.backend.declareOperatorState(name, mode);
      core.operatorStates.set(name, [mode, this.handle]);
    } else if (known[0] !== mode) {
      throw new StateError(`operator state ${JSON.stringify(name)} was declared with another redistribution; a state keeps one mode`);
    } else this.handle = known[1];
  }
  read() {
    return this.core.backend.getOperatorState(this.handle).map((e) => decode(e));
  }
  write(elements) {
    let encoded;
    try {
      encoded = elements.map((e) => encode(e));
    } catch (x) {
      throw new StateError(`operator state ${JSON.stringify(this.name)}: ${x.message}`);
    }
    this.core.backend.setOperatorState(this.handle, encoded);
  }
}

/** A list per subtask, not tied to a key; each call crosses to the host. */
export class OperatorListState extends OperatorStateBase {
  get() {
    return this.read();
  }
  set(elements) {
    this.write(Array.from(elements));
  }
  add(element) {
    this.write([...this.read(), element]);
  }
  clear() {
    this.write([]);
  }
}

/** A single value per subtask. */
export class OperatorState extends OperatorStateBase {
  get(fallback = null) {
    const elements = this.read();
    return elements.length > 0 ? elements[0] : fallback;
  }
  set(value) {
    this.write([value]);
  }
  clear() {
    this.write([]);
  }
}

class Logging {
  log(level, message) {
    this.core.backend.log(level, String(message));
  }
  trace(m) {
    this.log(Level.TRACE, m);
  }
  debug(m) {
    this.log(Level.DEBUG, m);
  }
  info(m) {
    this.log(Level.INFO, m);
  }
  warn(m) {
    this.log(Level.WARN, m);
  }
  error(m) {
    this.log(Level.ERROR, m);
  }
  operatorState(name) {
    return new OperatorState(this.core, name, Redistribution.SPLIT);
  }
  operatorListState(name) {
    return new OperatorListState(this.core, name, Redistribution.SPLIT);
  }
  unionListState(name) {
    return new OperatorListState(this.core, name, Redistribution.UNION);
  }
}

/** What open() gets: who this instance is, its config, keyed state to declare, operator state
 * and the log. */
export class OpenContext extends Logging {
  constructor(core, info, ctx) {
    super();
    this.core = core;
    this.ctx = ctx;
    this.operatorUid = info.operatorUid;
    this.subtaskIndex = info.subtaskIndex;
    this.parallelism = info.parallelism;
    this.configJson = info.config;
  }
  /** The operator's config table of the job spec, as an object ({} when absent). */
  get config() {
    try {
      return JSON.parse(this.configJson || "{}");
    } catch (e) {
      throw new WeirError(`the operator's config is not JSON: ${e.message}`);
    }
  }
  declare(cls, name, ttl) {
    const handle = this.ctx.handle(cls, name, ttl);
    // Declared now, so that a state declared twice in two ways fails open.
    this.core.entry(name, cls.kind, ttl);
    return handle;
  }
  /** Declares the keyed value state `name` once, as Flink's state descriptors are, and returns
   * its handle: keep it (`this.count = ctx.valueState("count")`) and use it in process and
   * onTimer, where it acts on the current key. The same state as Context.valueState(name);
   * declaring it here also finds a conflict in open. */
  valueState(name, ttl = null) {
    return this.declare(ValueState, name, ttl);
  }
  /** Declares the keyed list state `name` (see valueState). */
  listState(name, ttl = null) {
    return this.declare(ListState, name, ttl);
  }
  /** Declares the keyed map state `name` (see valueState). */
  mapState(name, ttl = null) {
    return this.declare(MapState, name, ttl);
  }
}

/** What process, onTimer, finishBatch and close get. */
export class Context extends Logging {
  constructor(core) {
    super();
    this.core = core;
    this.slot = null;
    this.key = null;
    this.timestamp = null;
    this.handles = new Map();
  }
  /** The key of the record or timer being handled (null without one). */
  get currentKey() {
    return this.key;
  }
  handle(cls, name, ttl) {
    if (ttl !== null && !(ttl instanceof Ttl)) throw new TypeError(`ttl of state ${JSON.stringify(name)} must be a Ttl`);
    let h = this.handles.get(name);
    if (!h || !(h instanceof cls) || !sameTtl(h.ttl, ttl)) {
      h = new cls(this, name, ttl);
      this.handles.set(name, h);
    }
    return h;
  }
  valueState(name, ttl = null) {
    return this.handle(ValueState, name, ttl);
  }
  listState(name, ttl = null) {
    return this.handle(ListState, name, ttl);
  }
  mapState(name, ttl = null) {
    return this.handle(MapState, name, ttl);
  }
  /** Emits an insert with the current record's timestamp; key and value are Uint8Arrays or
   * strings (another value is written as String(value)); key may be null. */
  emit(key, value) {
    this.core.emit(null, Kind.INSERT, key === null ? null : asBytes(key, "key"), this.timestamp, valueBytes(value));
  }
  emitRecord(kind, key, timestamp, value) {
    this.core.emit(null, kind, key === null ? null : asBytes(key, "key"), timestamp, valueBytes(value));
  }
  emitTo(sideOutput, key, value) {
    const name = asBytes(sideOutput, "sideOutput");
    this.core.emit(name, Kind.INSERT, key === null ? null : asBytes(key, "key"), this.timestamp, valueBytes(value));
  }
  timer(op, timestamp, domain) {
    if (this.slot === null) {
      throw new StateError('timers are keyed, but there is no current key: key the stream (edge = "key_by") before this operator');
    }
    this.core.timer(op, this.slot, Math.trunc(timestamp), domain);
  }
  /** onTimer runs for the current key once the watermark reaches `timestamp`. */
  registerEventTimer(timestamp) {
    this.timer(w.REGISTER_EVENT, timestamp, 0);
  }
  deleteEventTimer(timestamp) {
    this.timer(w.DELETE_EVENT, timestamp, 0);
  }
  registerProcessingTimeTimer(timestamp) {
    this.timer(w.REGISTER_PROCESSING, timestamp, 1);
  }
  deleteProcessingTimeTimer(timestamp) {
    this.timer(w.DELETE_PROCESSING, timestamp, 1);
  }
  currentWatermark() {
    return this.core.backend.currentWatermark();
  }
  currentProcessingTime() {
    return this.core.backend.currentProcessingTime();
  }
}

/** An operator with its runtime state. */
export class Instance {
  constructor(operator, backend, info) {
    this.operator = operator;
    this.core = new Core(backend);
    this.info = info;
    this.ctx = new Context(this.core);
  }

  open() {
    try {
      this.operator.open(new OpenContext(this.core, this.info, this.ctx));
    } catch (e) {
      throw new WeirError(failure(e, "open"));
    }
  }

  process(batch) {
    const { core, ctx } = this;
    const r = new w.Reader(batch);
    const keys = r.keyTable();
    core.begin(keys);
    const n = r.u32();
    const describe = this.operator.describeInput ?? describeRecord;
    for (let index = 0; index < n; index++) {
      const hdr = r.u8();
      let slot = null;
      let key = null;
      if (hdr & w.HAS_KEY) {
        slot = r.u32();
        key = keys[slot];
      }
      const ts = hdr & w.HAS_TIMESTAMP ? r.i64() : null;
      const value = r.bytes();
      ctx.slot = slot;
      ctx.key = key;
      ctx.timestamp = ts;
      try {
        this.operator.process(ctx, new Record(key, value, ts, hdr & 3, hdr & w.SECOND_INPUT ? 1 : 0));
      } catch (e) {
        throw new WeirError(failure(e, describe(index, key, value)));
      }
    }
    r.end("batch");
    ctx.slot = ctx.key = ctx.timestamp = null;
    try {
      this.operator.finishBatch(ctx);
    } catch (e) {
      throw new WeirError(failure(e, "finishBatch"));
    }
    core.finish();
  }

  onTimers(buf) {
    const { core, ctx } = this;
    const r = new w.Reader(buf);
    const keys = r.keyTable();
    const n = r.u32();
    const fired = [];
    for (let i = 0; i < n; i++) fired.push([r.u8(), r.u32(), r.i64()]);
    core.begin(keys);
    const ops = core.timerOps;
    for (const [domain, slot, ts] of fired) {
      // A timer that a callback of this firing deleted does not fire (as in Flink).
      const op = ops.size > 0 ? ops.get(`${slot}/${domain}/${ts}`)?.[0] : undefined;
      if (op === w.DELETE_EVENT || op === w.DELETE_PROCESSING) continue;
      const key = keys[slot];
      ctx.slot = slot;
      ctx.key = key;
      ctx.timestamp = domain === 0 ? ts : null;
      try {
        this.operator.onTimer(ctx, new Timer(domain, key, ts));
      } catch (e) {
        const kind = domain === 0 ? "event-time" : "processing-time";
        throw new WeirError(failure(e, `${kind} timer at ${ts} (${describeKey(key)})`));
      }
    }
    ctx.slot = ctx.key = ctx.timestamp = null;
    core.finish();
  }

  close() {
    this.core.begin([]);
    this.ctx.slot = this.ctx.key = this.ctx.timestamp = null;
    try {
      this.operator.close(this.ctx);
    } catch (e) {
      throw new WeirError(failure(e, "close"));
    }
    this.core.finish();
  }
}
