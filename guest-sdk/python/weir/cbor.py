"""The state codec shared by weir's SDKs: CBOR (RFC 8949), a subset every SDK reads and writes.

State values and map keys are stored as the bytes this module makes, so state written by an
operator in one language can be read by its rewrite in another (the Rust SDK encodes serde
types as CBOR with `ciborium`, the JavaScript SDK the same subset). The subset:

========================  ==========================================================
Python                    CBOR
========================  ==========================================================
``None``                  null (``0xf6``); undefined (``0xf7``) also reads as ``None``
``bool``                  false, true
``int``                   unsigned or negative integer, shortest form, 64 bits at most
``float``                 double precision (64 bits), always; half and single also read
``str``                   text string (UTF-8)
``bytes``, ``bytearray``  byte string
``list``, ``tuple``       array (both read back as ``list``)
``dict``                  map, in insertion order (a Rust struct is a map of its fields)
========================  ==========================================================

Tags are read as the value they tag; indefinite lengths, bignums and other simple values
are refused with :class:`CodecError`. Integers and strings used as map-state keys encode to
the same bytes in every SDK, so a map written in one language is found by key in another.
"""

import struct

__all__ = ["CodecError", "encode", "decode"]


class CodecError(ValueError):
    """A value that cannot be encoded, or bytes that are not a value of the subset."""


_F16 = struct.Struct(">e")
_F32 = struct.Struct(">f")
_F64 = struct.Struct(">d")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")

# The encodings of 0..23 and -1..-24: one byte each, the common case of counters.
_SMALL = [bytes([n]) for n in range(24)]
_SMALL_NEG = [bytes([0x20 + n]) for n in range(24)]


def _head(out: bytearray, major: int, n: int) -> None:
    """Appends the head of a data item of major type ``major`` with argument ``n``."""
    m = major << 5
    if n < 24:
        out.append(m | n)
    elif n < 0x100:
        out.append(m | 24)
        out.append(n)
    elif n < 0x10000:
        out.append(m | 25)
        out += _U16.pack(n)
    elif n < 0x100000000:
        out.append(m | 26)
        out += _U32.pack(n)
    elif n < 0x10000000000000000:
        out.append(m | 27)
        out += _U64.pack(n)
    else:
        raise CodecError(f"the integer {n} does not fit in 64 bits")


def _encode(out: bytearray, v) -> None:
    t = type(v)
    if t is int:
        if 0 <= v < 24:
            out += _SMALL[v]
        elif v >= 0:
            _head(out, 0, v)
        else:
            _head(out, 1, -1 - v)
    elif t is str:
        b = v.encode()
        _head(out, 3, len(b))
        out += b
    elif v is None:
        out.append(0xF6)
    elif t is bool:
        out.append(0xF5 if v else 0xF4)
    elif t is float:
        _float(out, v)
    elif t is bytes or t is bytearray or t is memoryview:
        _head(out, 2, len(v))
        out += v
    elif t is list or t is tuple:
        _head(out, 4, len(v))
        for item in v:
            _encode(out, item)
    elif t is dict:
        _head(out, 5, len(v))
        for k, item in v.items():
            _encode(out, k)
            _encode(out, item)
    elif isinstance(v, bool):
        out.append(0xF5 if v else 0xF4)
    elif isinstance(v, int):
        _encode(out, int(v))
    elif isinstance(v, float):
        _float(out, float(v))
    elif isinstance(v, str):
        _encode(out, str(v))
    elif isinstance(v, (bytes, bytearray)):
        _encode(out, bytes(v))
    elif isinstance(v, (list, tuple)):
        _encode(out, list(v))
    elif isinstance(v, dict):
        _encode(out, dict(v))
    else:
        raise CodecError(
            f"cannot store a {t.__name__} in state: use None, bool, int, float, str, bytes, "
            "lists and dicts of them (convert other types, e.g. a dataclass with "
            "dataclasses.asdict)"
        )


def _float(out: bytearray, v: float) -> None:
    # Always 64 bits: the Rust SDK's decoder reads an f64 only from a double.
    out.append(0xFB)
    out += _F64.pack(v)


def encode(value) -> bytes:
    """The CBOR encoding of ``value``; :class:`CodecError` for a type outside the subset."""
    if type(value) is int and 0 <= value < 24:
        return _SMALL[value]
    out = bytearray()
    _encode(out, value)
    return bytes(out)


def _arg(b, pos: int, info: int):
    """The argument of a head whose additional information is ``info``, and where it ends."""
    if info < 24:
        return info, pos
    if info == 24:
        return b[pos], pos + 1
    if info == 25:
        return _U16.unpack_from(b, pos)[0], pos + 2
    if info == 26:
        return _U32.unpack_from(b, pos)[0], pos + 4
    if info == 27:
        return _U64.unpack_from(b, pos)[0], pos + 8
    raise CodecError(f"unsupported CBOR item (additional information {info}) at byte {pos - 1}")


def _decode(b, pos: int):
    ib = b[pos]
    pos += 1
    major, info = ib >> 5, ib & 0x1F
    if major == 0:
        return _arg(b, pos, info)
    if major == 1:
        n, pos = _arg(b, pos, info)
        return -1 - n, pos
    if major == 2 or major == 3:
        n, pos = _arg(b, pos, info)
        end = pos + n
        if end > len(b):
            raise CodecError("a CBOR string runs past the end of the value")
        chunk = bytes(b[pos:end])
        if major == 3:
            try:
                return chunk.decode(), end
            except UnicodeDecodeError as e:
                raise CodecError(f"a CBOR text string is not UTF-8: {e}") from None
        return chunk, end
    if major == 4:
        n, pos = _arg(b, pos, info)
        items = []
        for _ in range(n):
            item, pos = _decode(b, pos)
            items.append(item)
        return items, pos
    if major == 5:
        n, pos = _arg(b, pos, info)
        d = {}
        for _ in range(n):
            k, pos = _decode(b, pos)
            v, pos = _decode(b, pos)
            if isinstance(k, list):
                k = tuple(k)
            d[k] = v
        return d, pos
    if major == 6:
        _, pos = _arg(b, pos, info)
        return _decode(b, pos)
    # major 7
    if info == 20:
        return False, pos
    if info == 21:
        return True, pos
    if info == 22 or info == 23:
        return None, pos
    if info == 25:
        return _F16.unpack_from(b, pos)[0], pos + 2
    if info == 26:
        return _F32.unpack_from(b, pos)[0], pos + 4
    if info == 27:
        return _F64.unpack_from(b, pos)[0], pos + 8
    raise CodecError(f"unsupported CBOR simple value {info} at byte {pos - 1}")


def decode(data):
    """The value ``data`` (bytes) encodes; :class:`CodecError` if it is not exactly one value."""
    if len(data) == 1 and data[0] < 24:
        return data[0]
    try:
        value, end = _decode(data, 0)
    except (IndexError, struct.error):
        raise CodecError(f"a CBOR value is cut short ({len(data)} bytes)") from None
    if end != len(data):
        raise CodecError(f"{len(data) - end} bytes after the CBOR value")
    return value
