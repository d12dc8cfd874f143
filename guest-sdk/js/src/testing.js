// Run an operator in plain Node (node --test, no WebAssembly): Harness.
//
// The harness drives the runtime a component runs (batch decoding, per-batch state caches,
// output buffering, timer changes) against an in-memory host with the host's state semantics.
// It does not enforce state TTL (the host's backends do) nor partition keys over subtasks.

import { decode } from "./cbor.js";
import { Instance, LIST, MAP, VALUE, byteKey } from "./runtime.js";
import { Kind, WeirError } from "./types.js";
import * as w from "./wire.js";

/** A map whose load encoding is larger than this is sent as LARGE, as the host does. */
const MAP_LOAD_LIMIT = 16 * 1024;

const utf8 = new TextEncoder();
const text = new TextDecoder();
const bytes = (v) => (v === null || v === undefined ? null : typeof v === "string" ? utf8.encode(v) : v);

/** A record to feed the operator: new Input(value, {key, timestamp, kind}). A plain string or
 * Uint8Array is an unkeyed record, a [key, value] pair a keyed one. */
export class Input {
  constructor(value, { key = null, timestamp = null, kind = Kind.INSERT } = {}) {
    this.value = value;
    this.key = key;
    this.timestamp = timestamp;
    this.kind = kind;
  }
}

/** A record the operator emitted. */
export class Output {
  constructor({ sideOutput, kind, key, timestamp, value }) {
    this.sideOutput = sideOutput;
    this.kind = kind;
    this.key = key;
    this.timestamp = timestamp;
    this.value = value;
  }
  get keyStr() {
    return this.key === null ? null : text.decode(this.key);
  }
  get valueStr() {
    return text.decode(this.value);
  }
}

function input(item) {
  if (item instanceof Input) return item;
  if (Array.isArray(item)) return new Input(item[1], { key: item[0] });
  return new Input(item);
}

/** A buffer starting with the key table of `keys` (null skipped, each key once), and the
 * slot of each key (by byteKey). */
function keyTable(keys) {
  const slots = new Map();
  const table = [];
  for (const k of keys) {
    if (k !== null && !slots.has(byteKey(k))) {
      slots.set(byteKey(k), table.length);
      table.push(k);
    }
  }
  const b = new w.Writer();
  b.u32(table.length);
  for (const k of table) b.bytes(k);
  return [b, slots];
}

function putEntries(b, entries) {
  const keys = Array.from(entries.keys()).sort();
  b.u32(keys.length);
  for (const bk of keys) {
    const [k, v] = entries.get(bk);
    b.bytes(k);
    b.bytes(v);
  }
}

/** The in-memory host: keyed state, timers, output, logs and operator state. */
class MemoryBackend {
  constructor() {
    this.states = []; // {name, kind, data: Map(byteKey(key) -> stored)}
    this.timers = new Map(); // `${domain}/${ts}/${byteKey(key)}` -> [domain, ts, key]
    this.watermark = null;
    this.processingTime = 0;
    this.output = [];
    this.logs = [];
    this.operatorStates = [];
    this.calls = { load: 0, store: 0, mapGet: 0, mapEntries: 0, emit: 0 };
  }
  state(name) {
    return this.states.find((s) => s.name === name);
  }
  declareState(kind, name) {
    const i = this.states.findIndex((s) => s.name === name);
    if (i >= 0) {
      if (this.states[i].kind !== kind) throw new WeirError(`state ${name} is a ${this.states[i].kind} state, not a ${kind} state`);
      return i;
    }
    this.states.push({ name, kind, data: new Map() });
    return this.states.length - 1;
  }
  load(handle, keys) {
    this.calls.load++;
    const { kind, data } = this.states[handle];
    const b = new w.Writer();
    for (const key of keys) {
      const stored = data.get(byteKey(key));
      if (kind === VALUE) {
        if (stored === undefined) b.u32(w.NONE);
        else b.bytes(stored);
      } else if (kind === LIST) {
        const items = stored ?? [];
        b.u32(items.length);
        for (const item of items) b.bytes(item);
      } else {
        const entries = stored ?? new Map();
        let size = 4;
        for (const [k, v] of entries.values()) size += 8 + k.length + v.length;
        if (size > MAP_LOAD_LIMIT) {
          b.u32(w.LARGE);
          b.u32(entries.size);
        } else putEntries(b, entries);
      }
    }
    return b.finish();
  }
  mapGet(handle, keys, slot, mapKey) {
    this.calls.mapGet++;
    const entries = this.states[handle].data.get(byteKey(keys[slot]));
    return entries?.get(byteKey(mapKey))?.[1] ?? null;
  }
  mapEntries(handle, keys, slot) {
    this.calls.mapEntries++;
    const b = new w.Writer();
    putEntries(b, this.states[handle].data.get(byteKey(keys[slot])) ?? new Map());
    return b.finish();
  }
  store(handle, keys, changes) {
    this.calls.store++;
    const { kind, data } = this.states[handle];
    const r = new w.Reader(changes);
    while (!r.done()) {
      const key = byteKey(keys[r.u32()]);
      const op = r.u8();
      if (op === w.CLEAR) data.delete(key);
      else if (kind === VALUE) data.set(key, r.bytes().slice());
      else if (kind === LIST) {
        const n = r.u32();
        const items = [];
        for (let i = 0; i < n; i++) items.push(r.bytes().slice());
        const list = op === w.LIST_REPLACE ? items : (data.get(key) ?? []).concat(items);
        if (list.length > 0) data.set(key, list);
        else data.delete(key);
      } else {
        const k = r.bytes().slice();
        if (op === w.MAP_PUT) {
          if (!data.has(key)) data.set(key, new Map());
          data.get(key).set(byteKey(k), [k, r.bytes().slice()]);
        } else {
          const m = data.get(key);
          if (m) {
            m.delete(byteKey(k));
            if (m.size === 0) data.delete(key);
          }
        }
      }
    }
  }
  emit(records) {
    this.calls.emit++;
    for (const rec of w.readOutput(records)) this.output.push(new Output(rec));
  }
  updateTimers(keys, changes) {
    const r = new w.Reader(changes);
    while (!r.done()) {
      const op = r.u8();
      const key = keys[r.u32()].slice();
      const ts = r.i64();
      const domain = op < 2 ? 0 : 1;
      const id = `${domain}/${ts}/${byteKey(key)}`;
      if (op === w.REGISTER_EVENT || op === w.REGISTER_PROCESSING) this.timers.set(id, [domain, ts, key]);
      else this.timers.delete(id);
    }
  }
  currentWatermark() {
    return this.watermark;
  }
  currentProcessingTime() {
    return this.processingTime;
  }
  log(level, message) {
    this.logs.push([level, message]);
  }
  declareOperatorState(name, mode) {
    const i = this.operatorStates.findIndex((s) => s.name === name);
    if (i >= 0) return i;
    this.operatorStates.push({ name, mode, elements: [] });
    return this.operatorStates.length - 1;
  }
  getOperatorState(handle) {
    return this.operatorStates[handle].elements.slice();
  }
  setOperatorState(handle, elements) {
    this.operatorStates[handle].elements = elements.map((e) => e.slice());
  }
  takeDue(domain, upTo) {
    const due = [];
    for (const [id, t] of this.timers) {
      if (t[0] === domain && t[1] <= upTo) {
        due.push(t);
        this.timers.delete(id);
      }
    }
    return due.sort((a, b) => a[1] - b[1] || (byteKey(a[2]) < byteKey(b[2]) ? -1 : 1));
  }
}

/** Runs an operator class natively against an in-memory host. Each process() call is one
 * batch and returns what the operator emitted; state survives restart(). */
export class Harness {
  constructor(operatorClass, { config = null, parallelism = 1, subtaskIndex = 0, operatorUid = "op" } = {}) {
    this.operatorClass = operatorClass;
    this.info = {
      operatorUid,
      subtaskIndex,
      parallelism,
      config: config === null ? "{}" : typeof config === "string" ? config : JSON.stringify(config),
    };
    this.backend = new MemoryBackend();
    this.current = null;
  }
  instance() {
    if (this.current === null) {
      const instance = new Instance(new this.operatorClass(), this.backend, this.info);
      instance.open();
      this.current = instance;
    }
    return this.current;
  }
  take() {
    const out = this.backend.output;
    this.backend.output = [];
    return out;
  }
  /** Feeds `records` (Input, string/Uint8Array or [key, value]) as one batch. */
  process(records, second = false) {
    let out;
    const inputs = Array.from(records, input);
    const [b, slots] = keyTable(inputs.map((i) => bytes(i.key)));
    b.u32(inputs.length);
    for (const i of inputs) {
      const k = bytes(i.key);
      let hdr = i.kind | (second ? w.SECOND_INPUT : 0);
      if (k !== null) hdr |= w.HAS_KEY;
      if (i.timestamp !== null) hdr |= w.HAS_TIMESTAMP;
      b.u8(hdr);
      if (k !== null) b.u32(slots.get(byteKey(k)));
      if (i.timestamp !== null) b.i64(i.timestamp);
      b.bytes(bytes(i.value));
    }
    try {
      this.instance().process(b.finish());
    } finally {
      out = this.take();
    }
    return out;
  }
  /** Feeds `records` as one batch of the operator's second input. */
  processSecond(records) {
    return this.process(records, true);
  }
  fire(domain, upTo) {
    const outputs = [];
    for (let round = 0; round < 10000; round++) {
      const due = this.backend.takeDue(domain, upTo);
      if (due.length === 0) return outputs;
      const [b, slots] = keyTable(due.map(([, , key]) => key));
      b.u32(due.length);
      for (const [d, ts, key] of due) {
        b.u8(d);
        b.u32(slots.get(byteKey(key)));
        b.i64(ts);
      }
      try {
        this.instance().onTimers(b.finish());
      } finally {
        outputs.push(...this.take());
      }
    }
    throw new Error(`timers keep registering timers at or before ${upTo}`);
  }
  /** Moves the watermark to `timestamp` and fires the event-time timers it passes. */
  fireEventTimersUpTo(timestamp) {
    if (this.backend.watermark === null || timestamp > this.backend.watermark) this.backend.watermark = timestamp;
    return this.fire(0, timestamp);
  }
  /** Sets the clock to `ms` and fires the processing-time timers due by then. */
  setProcessingTime(ms) {
    this.backend.processingTime = ms;
    return this.fire(1, ms);
  }
  close() {
    let out;
    try {
      this.instance().close();
    } finally {
      this.current = null;
      out = this.take();
    }
    return out;
  }
  /** Drops the instance (as a failure does); state and timers stay. */
  restart() {
    this.current = null;
  }
  stored(name, key) {
    return this.backend.state(name)?.data.get(byteKey(bytes(key)));
  }
  valueState(name, key) {
    const v = this.stored(name, key);
    return v === undefined ? null : decode(v);
  }
  listState(name, key) {
    return (this.stored(name, key) ?? []).map((i) => decode(i));
  }
  mapState(name, key) {
    const entries = this.stored(name, key) ?? new Map();
    return Array.from(entries.keys())
      .sort()
      .map((bk) => entries.get(bk).map((b) => decode(b)));
  }
  operatorState(name) {
    const s = this.backend.operatorStates.find((s) => s.name === name);
    return s && s.elements.length > 0 ? decode(s.elements[0]) : null;
  }
  eventTimers(key) {
    return this.timersOf(0, key);
  }
  processingTimeTimers(key) {
    return this.timersOf(1, key);
  }
  timersOf(domain, key) {
    const k = byteKey(bytes(key));
    return Array.from(this.backend.timers.values())
      .filter(([d, , tk]) => d === domain && byteKey(tk) === k)
      .map(([, ts]) => ts)
      .sort((a, b) => a - b);
  }
  get logs() {
    return this.backend.logs.slice();
  }
}

// Window calls as a window of the host makes them, to drive a window function's operator.
export { processCall, resultCall, updateCall } from "./window.js";
