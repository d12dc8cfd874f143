// The state codec shared by weir's SDKs: CBOR (RFC 8949), a subset every SDK reads and writes,
// so state written by an operator in one language is read by its rewrite in another.
//
//   JavaScript                 CBOR
//   null, undefined            null (0xf6); undefined (0xf7) reads as null
//   boolean                    false, true
//   integer number, bigint     unsigned or negative integer, shortest form, 64 bits at most
//   other number               double precision (64 bits); half and single also read
//   string                     text string (UTF-8)
//   Uint8Array                 byte string
//   Array                      array
//   plain object, Map          map (an object's keys in insertion order)
//
// Integers read back as numbers when they are safe integers, else as bigints; maps whose
// keys are all strings read back as plain objects, others as Maps. Tags are read as the
// value they tag; indefinite lengths are refused.

export class CodecError extends Error {
  constructor(message) {
    super(message);
    this.name = "CodecError";
  }
}

import { ByteBuffer } from "./wire.js";

const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: true });
const TWO_64 = 1n << 64n;

class Writer extends ByteBuffer {
  head(major, n) {
    const m = major << 5;
    if (typeof n === "bigint") {
      if (n < 0n || n >= TWO_64) throw new CodecError(`the integer ${n} does not fit in 64 bits`);
      if (n < 0x100000000n) return this.head(major, Number(n));
      this.reserve(9);
      this.buf[this.len] = m | 27;
      this.view.setBigUint64(this.len + 1, n);
      this.len += 9;
      return;
    }
    if (n < 24) this.u8(m | n);
    else if (n < 0x100) {
      this.reserve(2);
      this.buf[this.len] = m | 24;
      this.buf[this.len + 1] = n;
      this.len += 2;
    } else if (n < 0x10000) {
      this.reserve(3);
      this.buf[this.len] = m | 25;
      this.view.setUint16(this.len + 1, n);
      this.len += 3;
    } else if (n < 0x100000000) {
      this.reserve(5);
      this.buf[this.len] = m | 26;
      this.view.setUint32(this.len + 1, n);
      this.len += 5;
    } else this.head(major, BigInt(n));
  }
  value(v) {
    switch (typeof v) {
      case "number":
        if (Number.isSafeInteger(v)) {
          if (v >= 0) this.head(0, v);
          else this.head(1, -1 - v);
        } else {
          this.reserve(9);
          this.buf[this.len] = 0xfb;
          this.view.setFloat64(this.len + 1, v);
          this.len += 9;
        }
        return;
      case "bigint":
        if (v >= 0n) this.head(0, v);
        else this.head(1, -1n - v);
        return;
      case "string": {
        const b = encoder.encode(v);
        this.head(3, b.length);
        this.raw(b);
        return;
      }
      case "boolean":
        this.u8(v ? 0xf5 : 0xf4);
        return;
      case "undefined":
        this.u8(0xf6);
        return;
      case "object":
        if (v === null) this.u8(0xf6);
        else if (v instanceof Uint8Array) {
          this.head(2, v.length);
          this.raw(v);
        } else if (Array.isArray(v)) {
          this.head(4, v.length);
          for (const item of v) this.value(item);
        } else if (v instanceof Map) {
          this.head(5, v.size);
          for (const [k, item] of v) {
            this.value(k);
            this.value(item);
          }
        } else if (Object.getPrototypeOf(v) === Object.prototype || Object.getPrototypeOf(v) === null) {
          const keys = Object.keys(v);
          this.head(5, keys.length);
          for (const k of keys) {
            this.value(k);
            this.value(v[k]);
          }
        } else {
          throw new CodecError(
            `cannot store a ${v.constructor?.name ?? "object"} in state: use null, booleans, ` +
              "numbers, bigints, strings, Uint8Arrays, arrays, plain objects and Maps of them",
          );
        }
        return;
      default:
        throw new CodecError(`cannot store a ${typeof v} in state`);
    }
  }
  finish() {
    return this.buf.slice(0, this.len);
  }
}

/** The CBOR encoding of `value`; a CodecError for a value outside the subset. */
export function encode(value) {
  const w = new Writer();
  w.value(value);
  return w.finish();
}

class Reader {
  constructor(b) {
    this.b = b;
    this.view = new DataView(b.buffer, b.byteOffset, b.byteLength);
    this.pos = 0;
  }
  need(n) {
    if (this.pos + n > this.b.length) {
      throw new CodecError(`a CBOR value is cut short (${this.b.length} bytes)`);
    }
  }
  arg(info) {
    if (info < 24) return info;
    const p = this.pos;
    switch (info) {
      case 24:
        this.need(1);
        this.pos += 1;
        return this.b[p];
      case 25:
        this.need(2);
        this.pos += 2;
        return this.view.getUint16(p);
      case 26:
        this.need(4);
        this.pos += 4;
        return this.view.getUint32(p);
      case 27: {
        this.need(8);
        this.pos += 8;
        const n = this.view.getBigUint64(p);
        return n <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(n) : n;
      }
      default:
        throw new CodecError(`unsupported CBOR item (additional information ${info}) at byte ${p - 1}`);
    }
  }
  value() {
    this.need(1);
    const ib = this.b[this.pos++];
    const major = ib >> 5;
    const info = ib & 0x1f;
    switch (major) {
      case 0:
        return this.arg(info);
      case 1: {
        const n = this.arg(info);
        if (typeof n === "bigint") return -1n - n;
        const v = -1 - n;
        return Number.isSafeInteger(v) ? v : -1n - BigInt(n);
      }
      case 2:
      case 3: {
        const n = Number(this.arg(info));
        if (this.pos + n > this.b.length) throw new CodecError("a CBOR string runs past the end of the value");
        const chunk = this.b.subarray(this.pos, this.pos + n);
        this.pos += n;
        if (major === 2) return chunk.slice();
        try {
          return decoder.decode(chunk);
        } catch (e) {
          throw new CodecError(`a CBOR text string is not UTF-8: ${e.message}`);
        }
      }
      case 4: {
        const n = Number(this.arg(info));
        const items = [];
        for (let i = 0; i < n; i++) items.push(this.value());
        return items;
      }
      case 5: {
        const n = Number(this.arg(info));
        const entries = [];
        let strings = true;
        for (let i = 0; i < n; i++) {
          const k = this.value();
          if (typeof k !== "string") strings = false;
          entries.push([k, this.value()]);
        }
        if (!strings) return new Map(entries);
        const o = {};
        for (const [k, v] of entries) o[k] = v;
        return o;
      }
      case 6:
        this.arg(info);
        return this.value();
      default: {
        const p = this.pos;
        switch (info) {
          case 20:
            return false;
          case 21:
            return true;
          case 22:
          case 23:
            return null;
          case 25:
            this.need(2);
            this.pos += 2;
            return halfToNumber(this.view.getUint16(p));
          case 26:
            this.need(4);
            this.pos += 4;
            return this.view.getFloat32(p);
          case 27:
            this.need(8);
            this.pos += 8;
            return this.view.getFloat64(p);
          default:
            throw new CodecError(`unsupported CBOR simple value ${info} at byte ${p - 1}`);
        }
      }
    }
  }
}

function halfToNumber(h) {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * 2 ** -14 * (frac / 1024);
  if (exp === 31) return frac ? NaN : sign * Infinity;
  return sign * 2 ** (exp - 15) * (1 + frac / 1024);
}

/** The value `data` (a Uint8Array) encodes; a CodecError unless it is exactly one value. */
export function decode(data) {
  if (data.length === 1 && data[0] < 24) return data[0];
  const r = new Reader(data);
  const v = r.value();
  if (r.pos !== data.length) throw new CodecError(`${data.length - r.pos} bytes after the CBOR value`);
  return v;
}
