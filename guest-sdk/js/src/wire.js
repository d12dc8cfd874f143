// The buffers of wit/stream.wit, read and written: batches, fired timers, output, state loads
// and stores, timer changes. Integers little-endian; `bytes` is a u32 length and the bytes,
// NONE (0xFFFFFFFF) as a length means absent.

export const NONE = 0xffffffff;
export const LARGE = 0xfffffffe;
export const HAS_KEY = 4;
export const HAS_TIMESTAMP = 8;
export const SIDE_OUTPUT = 16;
export const SECOND_INPUT = 32;
export const REGISTER_EVENT = 0;
export const DELETE_EVENT = 1;
export const REGISTER_PROCESSING = 2;
export const DELETE_PROCESSING = 3;
export const CLEAR = 0;
export const VALUE_SET = 1;
export const LIST_REPLACE = 1;
export const LIST_APPEND = 2;
export const MAP_PUT = 1;
export const MAP_REMOVE = 2;

export class MalformedBuffer extends Error {}

/** Reads a buffer from the host. */
export class Reader {
  constructor(b) {
    this.b = b;
    this.view = new DataView(b.buffer, b.byteOffset, b.byteLength);
    this.pos = 0;
  }
  u8() {
    if (this.pos + 1 > this.b.length) throw new MalformedBuffer(`buffer cut short at ${this.pos}`);
    return this.b[this.pos++];
  }
  u32() {
    if (this.pos + 4 > this.b.length) throw new MalformedBuffer(`buffer cut short at ${this.pos}`);
    const v = this.view.getUint32(this.pos, true);
    this.pos += 4;
    return v;
  }
  i64() {
    if (this.pos + 8 > this.b.length) throw new MalformedBuffer(`buffer cut short at ${this.pos}`);
    const v = this.view.getBigInt64(this.pos, true);
    this.pos += 8;
    return Number(v);
  }
  take(n) {
    if (this.pos + n > this.b.length) {
      throw new MalformedBuffer(`bytes of length ${n} run past the end of the buffer at ${this.pos}`);
    }
    const v = this.b.subarray(this.pos, this.pos + n);
    this.pos += n;
    return v;
  }
  bytes() {
    return this.take(this.u32());
  }
  optBytes() {
    const n = this.u32();
    return n === NONE ? null : this.take(n);
  }
  keyTable() {
    const n = this.u32();
    const keys = [];
    for (let i = 0; i < n; i++) keys.push(this.bytes());
    return keys;
  }
  end(what) {
    if (this.pos !== this.b.length) {
      throw new MalformedBuffer(`${what}: ${this.b.length - this.pos} bytes left over`);
    }
  }
  done() {
    return this.pos >= this.b.length;
  }
}

/** A byte buffer that grows as it is written. */
export class ByteBuffer {
  constructor() {
    this.buf = new Uint8Array(256);
    this.view = new DataView(this.buf.buffer);
    this.len = 0;
  }
  reserve(n) {
    if (this.len + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.len + n) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.buf.subarray(0, this.len));
    this.buf = next;
    this.view = new DataView(next.buffer);
  }
  u8(v) {
    this.reserve(1);
    this.buf[this.len++] = v;
  }
  raw(b) {
    this.reserve(b.length);
    this.buf.set(b, this.len);
    this.len += b.length;
  }
  clear() {
    this.len = 0;
  }
  finish() {
    return this.buf.slice(0, this.len);
  }
}

/** Builds a buffer for the host (little-endian, as wit/stream.wit says). */
export class Writer extends ByteBuffer {
  u32(v) {
    this.reserve(4);
    this.view.setUint32(this.len, v, true);
    this.len += 4;
  }
  i64(v) {
    this.reserve(8);
    this.view.setBigInt64(this.len, BigInt(v), true);
    this.len += 8;
  }
  bytes(b) {
    this.u32(b.length);
    this.raw(b);
  }
}

/** One record of an output.emit buffer. */
export function putOutput(w, sideOutput, kind, key, timestamp, value) {
  let hdr = kind;
  if (sideOutput !== null) hdr |= SIDE_OUTPUT;
  if (key !== null) hdr |= HAS_KEY;
  if (timestamp !== null) hdr |= HAS_TIMESTAMP;
  w.u8(hdr);
  if (sideOutput !== null) w.bytes(sideOutput);
  if (key !== null) w.bytes(key);
  if (timestamp !== null) w.i64(timestamp);
  w.bytes(value);
}

/** The records of an output buffer: {sideOutput, kind, key, timestamp, value}. */
export function readOutput(b) {
  const r = new Reader(b);
  const out = [];
  const text = new TextDecoder();
  while (!r.done()) {
    const hdr = r.u8();
    const sideOutput = hdr & SIDE_OUTPUT ? text.decode(r.bytes()) : null;
    const key = hdr & HAS_KEY ? r.bytes().slice() : null;
    const timestamp = hdr & HAS_TIMESTAMP ? r.i64() : null;
    out.push({ sideOutput, kind: hdr & 3, key, timestamp, value: r.bytes().slice() });
  }
  return out;
}
