import assert from "node:assert/strict";
import { test } from "node:test";

import { CodecError, decode, encode } from "../src/cbor.js";

const hex = (b) => Buffer.from(b).toString("hex");
const bytes = (h) => new Uint8Array(Buffer.from(h, "hex"));

test("the bytes the Python and Rust SDKs write for the same values", () => {
  // RFC 8949 appendix A, and guest-sdk/src/state/codec.rs's struct.
  const cases = [
    [0, "00"], [23, "17"], [24, "1818"], [1000, "1903e8"], [1000000, "1a000f4240"],
    [1000000000000, "1b000000e8d4a51000"], [2n ** 64n - 1n, "1bffffffffffffffff"], [-1, "20"],
    [-1000, "3903e7"], [-(2n ** 64n), "3bffffffffffffffff"], [1.5, "fb3ff8000000000000"],
    [false, "f4"], [true, "f5"], [null, "f6"], ["", "60"], ["IETF", "6449455446"],
    ["ü", "62c3bc"], [new Uint8Array([1, 2, 3, 4]), "4401020304"], [[1, [2, 3]], "8201820203"],
    [{ a: 1, b: [2, 3] }, "a26161016162820203"],
    [{ count: 3, name: "ann", score: 1.5, tags: ["a"], parent: null },
      "a565636f756e7403646e616d6563616e6e6573636f7265fb3ff8000000000000647461677381616166706172656e74f6"],
  ];
  for (const [value, expected] of cases) {
    assert.equal(hex(encode(value)), expected, `${String(value)}`);
    assert.deepEqual(decode(bytes(expected)), value);
  }
});

test("half and single floats, tags and undefined are read", () => {
  assert.equal(decode(bytes("f93e00")), 1.5);
  assert.equal(decode(bytes("f97c00")), Infinity);
  assert.ok(Number.isNaN(decode(bytes("f97e00"))));
  assert.equal(decode(bytes("fa3fc00000")), 1.5);
  assert.equal(decode(bytes("c11a514b67b0")), 1363896240);
  assert.equal(decode(bytes("f7")), null);
});

test("maps with other than string keys read back as Maps", () => {
  const m = new Map([[1, "a"], [2, "b"]]);
  assert.deepEqual(decode(encode(m)), m);
});

test("random nested values round-trip", () => {
  let seed = 11;
  const random = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
  const value = (depth) => {
    const kind = Math.floor(random() * (depth < 3 ? 8 : 6));
    switch (kind) {
      case 0: return Math.floor((random() - 0.5) * 2 ** 50);
      case 1: return (random() - 0.5) * 10 ** Math.floor(random() * 20 - 10);
      case 2: return Array.from({ length: Math.floor(random() * 20) }, () => String.fromCodePoint(32 + Math.floor(random() * 0x3000))).join("");
      case 3: return new Uint8Array(Array.from({ length: Math.floor(random() * 20) }, () => Math.floor(random() * 256)));
      case 4: return [null, true, false][Math.floor(random() * 3)];
      case 5: return BigInt(Math.floor(random() * 2 ** 30)) * 2n ** 34n;
      case 6: return Array.from({ length: Math.floor(random() * 5) }, () => value(depth + 1));
      default: return Object.fromEntries(Array.from({ length: Math.floor(random() * 5) }, () => [`k${Math.floor(random() * 100)}`, value(depth + 1)]));
    }
  };
  const normalize = (v) => (typeof v === "bigint" && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v);
  for (let i = 0; i < 2000; i++) {
    const v = value(0);
    const back = decode(encode(v));
    assert.deepEqual(JSON.stringify(back, (_, x) => (typeof x === "bigint" ? `${x}n` : x)), JSON.stringify(v, (_, x) => { x = normalize(x); return typeof x === "bigint" ? `${x}n` : x; }));
  }
});

test("values outside the subset and malformed bytes are refused by name", () => {
  assert.throws(() => encode(2n ** 64n), /does not fit in 64 bits/);
  assert.throws(() => encode(new Set([1])), /cannot store a Set/);
  assert.throws(() => encode(() => 1), /cannot store a function/);
  assert.throws(() => decode(new Uint8Array()), CodecError);
  assert.throws(() => decode(bytes("1901")), /cut short/);
  assert.throws(() => decode(bytes("6261")), /past the end/);
  assert.throws(() => decode(bytes("0102")), /1 bytes after/);
  assert.throws(() => decode(bytes("9fff")), /unsupported CBOR item/);
  assert.throws(() => decode(bytes("62fffe")), /not UTF-8/);
});
