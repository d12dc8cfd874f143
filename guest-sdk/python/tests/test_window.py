"""Window functions run by a window of the host, driven here with the calls it makes."""

import pytest

import weir
from weir import cbor
from weir.window import (
    AggregateFunction,
    ProcessWindowFunction,
    Window,
    aggregate,
    process_call,
    process_window,
    result_call,
    update_call,
)

W = Window(0, 1000)


class CountSum(AggregateFunction):
    """``<count>:<sum>`` of a window's decimal values, as the Rust window-aggregate test
    guest."""

    def create(self):
        return [0, 0]

    def add(self, acc, value):
        return [acc[0] + 1, acc[1] + int(value)]

    def merge(self, acc, other):
        return [acc[0] + other[0], acc[1] + other[1]]

    def result(self, acc):
        return f"{acc[0]}:{acc[1]}"


class Listing(ProcessWindowFunction):
    def open(self, ctx):
        self.prefix = ctx.config.get("prefix", "")

    def process(self, ctx, key, window, values):
        listed = "+".join(v.decode() for v in values)
        ctx.emit(key, f"{self.prefix}{window.start},{window.end},{listed}")


def test_an_aggregate_folds_values_merges_sessions_and_gives_its_result():
    h = weir.testing.Harness(aggregate(CountSum))
    (a,) = h.process([("k", update_call(W, [], [b"2", b"3"]))])
    assert cbor.decode(a.value) == [2, 5]
    (b,) = h.process([("k", update_call(W, [a.value], [b"4"]))])
    # Two sessions merged: both accumulators, then the new values.
    (merged,) = h.process([("k", update_call(W, [a.value, b.value], [b"1"]))])
    assert cbor.decode(merged.value) == [6, 15]
    (out,) = h.process([("k", result_call(W, merged.value))])
    assert out.value == b"6:15"


def test_an_accumulator_of_the_rust_sdk_reads_the_same():
    # A Rust `(u64, u64)` accumulator is a CBOR array of two integers.
    h = weir.testing.Harness(aggregate(CountSum))
    (out,) = h.process([("k", result_call(W, bytes([0x82, 0x03, 0x18, 0x2A])))])
    assert out.value == b"3:42"


def test_a_process_window_function_gets_the_window_and_its_values():
    h = weir.testing.Harness(process_window(Listing), config={"prefix": "v2:"})
    (out,) = h.process([("k", process_call(Window(-1000, 0), [b"a", b"b"]))])
    assert (out.key, out.value) == (b"k", b"v2:-1000,0,a+b")


def test_a_function_of_the_wrong_kind_says_so():
    h = weir.testing.Harness(process_window(Listing))
    with pytest.raises(Exception, match='function = "aggregate"'):
        h.process([("k", update_call(W, [], [b"1"]))])
    h = weir.testing.Harness(aggregate(CountSum))
    with pytest.raises(Exception, match="only a window of the host calls"):
        h.process([("k", b"not a window call")])


def test_only_function_classes_are_accepted():
    with pytest.raises(TypeError, match="AggregateFunction subclass"):
        aggregate(Listing)
    with pytest.raises(TypeError, match="ProcessWindowFunction subclass"):
        process_window(CountSum)


class Failing(AggregateFunction, ProcessWindowFunction):
    """Fails on every call, as a function with a bug would."""

    def create(self):
        return 0

    def add(self, acc, value):
        raise ValueError("no adding today")

    def result(self, acc):
        raise ValueError("no results today")

    def process(self, ctx, key, window, values):
        raise ValueError("no firing today")


def test_a_failed_call_names_the_window_not_the_record():
    h = weir.testing.Harness(aggregate(Failing))
    with pytest.raises(Exception) as e:
        h.process([("bi", update_call(W, [], [b"1", b"2"]))])
    assert str(e.value).startswith(
        "adding records to the window [0, 1000) of key 'bi' with 2 records: "
        "ValueError: no adding today"
    )
    with pytest.raises(Exception) as e:
        h.process([("bi", result_call(W, cbor.encode(0)))])
    assert str(e.value).startswith(
        "taking the result of the window [0, 1000) of key 'bi': ValueError: no results today"
    )
    h = weir.testing.Harness(process_window(Failing))
    with pytest.raises(Exception) as e:
        h.process([("bi", process_call(W, [b"a"]))])
    assert str(e.value).startswith(
        "firing the window [0, 1000) of key 'bi' with 1 record: ValueError: no firing today"
    )
