"""The buffers of ``wit/stream.wit``, read and written: batches, fired timers, output, state
loads and stores, timer changes. All integers little-endian; ``bytes`` is a ``u32`` length
and the bytes, ``NONE`` (``0xFFFFFFFF``) as a length means absent."""

import struct

U32 = struct.Struct("<I")
I64 = struct.Struct("<q")
_SLOT_OP = struct.Struct("<IB")
_TIMER = struct.Struct("<BIq")
_FIRED = struct.Struct("<BIq")

NONE = 0xFFFFFFFF
LARGE = 0xFFFFFFFE

HAS_KEY = 4
HAS_TIMESTAMP = 8
SIDE_OUTPUT = 16
SECOND_INPUT = 32

# Timer ops of `timers.update`.
REGISTER_EVENT, DELETE_EVENT, REGISTER_PROCESSING, DELETE_PROCESSING = 0, 1, 2, 3

# State store ops, per kind.
CLEAR = 0
VALUE_SET = 1
LIST_REPLACE, LIST_APPEND = 1, 2
MAP_PUT, MAP_REMOVE = 1, 2


class MalformedBuffer(ValueError):
    """The host sent a buffer that does not follow ``wit/stream.wit``."""


def read_bytes(b, pos):
    (n,) = U32.unpack_from(b, pos)
    pos += 4
    end = pos + n
    if end > len(b):
        raise MalformedBuffer(f"bytes of length {n} run past the end of the buffer at {pos}")
    return b[pos:end], end


def read_opt_bytes(b, pos):
    (n,) = U32.unpack_from(b, pos)
    pos += 4
    if n == NONE:
        return None, pos
    end = pos + n
    if end > len(b):
        raise MalformedBuffer(f"bytes of length {n} run past the end of the buffer at {pos}")
    return b[pos:end], end


def read_key_table(b):
    """The key table at the start of a batch or timers buffer, and where it ends."""
    (n,) = U32.unpack_from(b, 0)
    pos = 4
    keys = []
    for _ in range(n):
        k, pos = read_bytes(b, pos)
        keys.append(k)
    return keys, pos


def read_fired(b, pos):
    """``(domain, slot, timestamp)`` of each fired timer after the key table."""
    (n,) = U32.unpack_from(b, pos)
    pos += 4
    out = []
    for _ in range(n):
        out.append(_FIRED.unpack_from(b, pos))
        pos += 13
    return out


def put_bytes(out, b):
    out += U32.pack(len(b))
    out += b


def put_output(out, side_output, kind, key, timestamp, value):
    """One record of an ``output.emit`` buffer."""
    hdr = kind
    if side_output is not None:
        hdr |= SIDE_OUTPUT
    if key is not None:
        hdr |= HAS_KEY
    if timestamp is not None:
        hdr |= HAS_TIMESTAMP
    out.append(hdr)
    if side_output is not None:
        put_bytes(out, side_output)
    if key is not None:
        put_bytes(out, key)
    if timestamp is not None:
        out += I64.pack(timestamp)
    put_bytes(out, value)


def read_output(b):
    """The records of an output buffer: ``(side_output, kind, key, timestamp, value)``."""
    pos, out = 0, []
    while pos < len(b):
        hdr = b[pos]
        pos += 1
        side = key = ts = None
        if hdr & SIDE_OUTPUT:
            side, pos = read_bytes(b, pos)
            side = side.decode()
        if hdr & HAS_KEY:
            key, pos = read_bytes(b, pos)
        if hdr & HAS_TIMESTAMP:
            (ts,) = I64.unpack_from(b, pos)
            pos += 8
        value, pos = read_bytes(b, pos)
        out.append((side, hdr & 3, key, ts, value))
    return out


def put_slot_op(out, slot, op):
    out += _SLOT_OP.pack(slot, op)


def put_timer_op(out, op, slot, timestamp):
    out += _TIMER.pack(op, slot, timestamp)


def read_timer_ops(b):
    return [_TIMER.unpack_from(b, pos) for pos in range(0, len(b), 13)]


def check_end(b, pos, what):
    if pos != len(b):
        raise MalformedBuffer(f"{what}: {len(b) - pos} bytes left over")
