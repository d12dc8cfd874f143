import math
import random

import pytest

from weir.cbor import CodecError, decode, encode

cbor2 = pytest.importorskip("cbor2")

SAMPLES = [
    None,
    True,
    False,
    0,
    1,
    23,
    24,
    255,
    256,
    65535,
    65536,
    2**32 - 1,
    2**32,
    2**64 - 1,
    -1,
    -24,
    -25,
    -256,
    -257,
    -(2**63),
    -(2**64),
    0.0,
    -0.0,
    1.5,
    0.1,
    1e300,
    65504.0,
    3.4028234663852886e38,
    math.inf,
    -math.inf,
    "",
    "word",
    "ünïcödé ✓",
    "x" * 300,
    b"",
    b"\x00\xff",
    bytes(range(256)) * 300,
    [],
    [1, "a", None, [2.5, b"x"]],
    {"count": 3},
    {"a": [1, 2], "b": {"c": None}},
]


@pytest.mark.parametrize("value", SAMPLES, ids=repr)
def test_round_trip_and_agreement_with_cbor2(value):
    data = encode(value)
    assert decode(data) == value
    # An independent implementation reads what we write, and we read what it writes.
    assert cbor2.loads(data) == value
    assert decode(cbor2.dumps(value)) == value
    # The same bytes: shortest integer and length heads, maps in insertion order, floats as
    # doubles (cbor2 writes infinities as halves).
    if not (isinstance(value, float) and math.isinf(value)):
        assert data == cbor2.dumps(value)


def test_floats_are_doubles_and_narrower_ones_are_read():
    assert encode(1.5) == bytes([0xFB, 0x3F, 0xF8, 0, 0, 0, 0, 0, 0])
    assert math.isnan(decode(encode(math.nan)))
    assert decode(bytes([0xF9, 0x3E, 0x00])) == 1.5
    assert decode(bytes([0xFA, 0x3F, 0xC0, 0, 0])) == 1.5


def test_tuples_are_arrays_and_array_keys_come_back_as_tuples():
    assert encode((1, "a")) == encode([1, "a"])
    assert decode(encode({(1, 2): "x"})) == {(1, 2): "x"}


def test_random_nested_values_round_trip():
    rng = random.Random(7)

    def value(depth):
        kind = rng.randrange(8 if depth < 3 else 6)
        if kind == 0:
            return rng.randrange(-(2**64), 2**64)
        if kind == 1:
            return rng.random() * 10 ** rng.randrange(-10, 10)
        if kind == 2:
            return "".join(chr(rng.randrange(32, 0x3000)) for _ in range(rng.randrange(40)))
        if kind == 3:
            return bytes(rng.randrange(256) for _ in range(rng.randrange(40)))
        if kind == 4:
            return rng.choice([None, True, False])
        if kind == 5:
            return rng.randrange(-30, 30)
        if kind == 6:
            return [value(depth + 1) for _ in range(rng.randrange(5))]
        return {str(rng.randrange(100)): value(depth + 1) for _ in range(rng.randrange(5))}

    for _ in range(2000):
        v = value(0)
        assert decode(encode(v)) == v
        assert cbor2.loads(encode(v)) == v


def test_unsigned_integers_sort_by_value_in_their_encoding():
    numbers = sorted(random.Random(1).sample(range(2**40), 500) + list(range(300)))
    assert sorted(numbers, key=encode) == numbers


@pytest.mark.parametrize(
    "value, message",
    [
        (2**64, "does not fit in 64 bits"),
        (-(2**64) - 1, "does not fit in 64 bits"),
        (object(), "cannot store a object"),
        ({1, 2}, "cannot store a set"),
    ],
)
def test_values_outside_the_subset_are_refused_by_name(value, message):
    with pytest.raises(CodecError, match=message):
        encode(value)


@pytest.mark.parametrize(
    "data, message",
    [
        (b"", "cut short"),
        (b"\x19\x01", "cut short"),
        (b"\x62a", "past the end"),
        (b"\x01\x02", "1 bytes after"),
        (b"\x9f\xff", "unsupported CBOR item"),
        (b"\xf8\x20", "unsupported CBOR simple value"),
        (b"\x62\xff\xfe", "not UTF-8"),
    ],
)
def test_malformed_bytes_are_refused(data, message):
    with pytest.raises(CodecError, match=message):
        decode(data)
