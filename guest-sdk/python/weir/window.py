"""Window functions: user code for a window of the host (``wasm`` and ``window`` on one
operator, with ``function = "aggregate"`` or ``"process"``), as ``weir_sdk::window`` in Rust.

The host assigns records to windows, keeps them in the job's state backend, fires the windows
as the watermark (or the clock) passes their end and merges sessions; the function only folds
or reads a window's values. End the module with
``Operator = weir.export(weir.window.aggregate(MyAggregate))`` (or ``process_window``).

>>> import weir
>>> from weir.window import AggregateFunction, Window, aggregate, result_call, update_call
>>> class Sum(AggregateFunction):
...     def create(self):
...         return 0
...     def add(self, acc, value):
...         return acc + int(value)
...     def merge(self, acc, other):
...         return acc + other
...     def result(self, acc):
...         return acc
>>> h = weir.testing.Harness(aggregate(Sum))
>>> acc = h.process([("k", update_call(Window(0, 1000), [], [b"2", b"3"]))])[0].value
>>> h.process([("k", result_call(Window(0, 1000), acc))])[0].value
b'5'
"""

import struct
from typing import NamedTuple

from . import _wire as w
from . import cbor
from ._runtime import describe_key
from .operator import Operator
from .types import WeirError

_UPDATE, _RESULT, _PROCESS = 0, 1, 2


class Window(NamedTuple):
    """A window ``[start, end)`` in milliseconds since the Unix epoch."""

    start: int
    end: int


class AggregateFunction:
    """Folds a window's records into an accumulator, which the host keeps in the window's
    state (encoded with :mod:`weir.cbor`): Flink's ``AggregateFunction``."""

    def open(self, ctx):
        """Called once before the first window, as :meth:`weir.Operator.open` (to read the
        operator's ``config``, say)."""

    def create(self):
        """A new window's accumulator."""
        raise NotImplementedError(f"{type(self).__name__} must define create(self)")

    def add(self, acc, value):
        """The accumulator with the record value ``value`` (bytes) added."""
        raise NotImplementedError(f"{type(self).__name__} must define add(self, acc, value)")

    def merge(self, acc, other):
        """Two sessions' accumulators made one (session windows only)."""
        raise NotImplementedError(
            f"{type(self).__name__} must define merge(self, acc, other) for session windows"
        )

    def result(self, acc):
        """The window's result (bytes, str, or a value written as ``str(value)``); the host
        writes it as a built-in aggregate's, ``<start>,<end>,<result>``."""
        raise NotImplementedError(f"{type(self).__name__} must define result(self, acc)")


class ProcessWindowFunction:
    """Gets all of a window's values when it fires and emits what it likes: Flink's
    ``ProcessWindowFunction``. The host keeps the records until then."""

    def open(self, ctx):
        """Called once before the first window, as :meth:`weir.Operator.open`."""

    def process(self, ctx, key, window, values):
        """The window (a :class:`Window`) of ``key`` (bytes) fired with its records' values
        (a list of bytes, in arrival order); what this emits goes out with the window's last
        millisecond as timestamp."""
        raise NotImplementedError(
            f"{type(self).__name__} must define process(self, ctx, key, window, values)"
        )


def _contract(what):
    return WeirError(
        f"{what}: this component is a window function, which only a window of the host calls "
        "(wasm and window on one operator)"
    )


def _read_call(b):
    """``(op, window, first, second)`` of a window call (see ``weir_wire::window``)."""
    if len(b) < 17:
        raise _contract("a record that is not a window call")
    op = b[0]
    window = Window(w.I64.unpack_from(b, 1)[0], w.I64.unpack_from(b, 9)[0])
    pos = 17
    try:
        if op == _UPDATE:
            accs, pos = _read_list(b, pos)
            values, _ = _read_list(b, pos)
            return op, window, accs, values
        if op == _RESULT:
            acc, _ = w.read_bytes(b, pos)
            return op, window, acc, None
        if op == _PROCESS:
            values, _ = _read_list(b, pos)
            return op, window, values, None
    except (w.MalformedBuffer, struct.error) as e:
        raise _contract(f"a malformed window call ({e})") from e
    raise _contract(f"a window call of unknown kind {op}")


def _describe_call(index, key, value):
    """A window call, for an error message: "firing the window [0, 1000) of key 'k' with 4
    records" (the record's index in the batch would say nothing to the function's author)."""
    try:
        op, window, first, values = _read_call(value)
    except WeirError:
        return f"window call {index} of the batch"
    what, n = {
        _UPDATE: ("adding records to", len(values or ())),
        _RESULT: ("taking the result of", 0),
        _PROCESS: ("firing", len(first)),
    }[op]
    key = "" if key is None else f" of {describe_key(key)}"
    records = {0: "", 1: " with 1 record"}.get(n, f" with {n} records")
    return f"{what} the window [{window.start}, {window.end}){key}{records}"


def _read_list(b, pos):
    (n,) = w.U32.unpack_from(b, pos)
    pos += 4
    items = []
    for _ in range(n):
        item, pos = w.read_bytes(b, pos)
        items.append(bytes(item))
    return items, pos


class _WindowOperator(Operator):
    """What the two window operators share: their function (the subclass's
    ``function_class``), made and opened in ``open``, and failures named by their window."""

    function_class = None

    def open(self, ctx):
        self.function = self.function_class()
        self.function.open(ctx)

    _describe_input = staticmethod(_describe_call)


def aggregate(function_class):
    """The operator that runs ``function_class`` (an :class:`AggregateFunction` subclass)
    for a window of the host with ``function = "aggregate"``."""
    if not (isinstance(function_class, type) and issubclass(function_class, AggregateFunction)):
        raise TypeError(
            f"weir.window.aggregate takes an AggregateFunction subclass, not {function_class!r}"
        )

    class Aggregate(_WindowOperator):
        def process(self, ctx, record):
            f = self.function
            op, _, first, values = _read_call(record.value)
            if op == _UPDATE:
                acc = None
                for a in first:
                    a = cbor.decode(a)
                    acc = a if acc is None else f.merge(acc, a)
                if acc is None:
                    acc = f.create()
                for v in values:
                    acc = f.add(acc, v)
                ctx.emit(None, cbor.encode(acc))
            elif op == _RESULT:
                ctx.emit(None, f.result(cbor.decode(first)))
            else:
                raise _contract(
                    'the window asked for a process-window function (function = "process"), '
                    "but this component exports an aggregate"
                )

    Aggregate.function_class = function_class
    Aggregate.__name__ = Aggregate.__qualname__ = f"Aggregate[{function_class.__name__}]"
    return Aggregate


def process_window(function_class):
    """The operator that runs ``function_class`` (a :class:`ProcessWindowFunction` subclass)
    for a window of the host with ``function = "process"``."""
    if not (
        isinstance(function_class, type) and issubclass(function_class, ProcessWindowFunction)
    ):
        raise TypeError(
            "weir.window.process_window takes a ProcessWindowFunction subclass, not "
            f"{function_class!r}"
        )

    class ProcessWindow(_WindowOperator):
        def process(self, ctx, record):
            op, window, values, _ = _read_call(record.value)
            if op != _PROCESS:
                raise _contract(
                    'the window asked for an aggregate function (function = "aggregate"), but '
                    "this component exports a process-window function"
                )
            self.function.process(ctx, record.key or b"", window, values)

    ProcessWindow.function_class = function_class
    ProcessWindow.__name__ = ProcessWindow.__qualname__ = (
        f"ProcessWindow[{function_class.__name__}]"
    )
    return ProcessWindow


def _head(op, window):
    return bytes([op]) + w.I64.pack(window.start) + w.I64.pack(window.end)


def _list(items):
    out = bytearray(w.U32.pack(len(items)))
    for i in items:
        w.put_bytes(out, i)
    return bytes(out)


def update_call(window, accs, values):
    """A window call as the host makes it (for tests with :class:`weir.testing.Harness`):
    merge the encoded accumulators ``accs``, add ``values``."""
    return _head(_UPDATE, window) + _list(accs) + _list(values)


def result_call(window, acc):
    """A window call asking for the result of encoded accumulator ``acc`` (for tests)."""
    out = bytearray(_head(_RESULT, window))
    w.put_bytes(out, acc)
    return bytes(out)


def process_call(window, values):
    """A window call firing ``window`` with ``values`` (for tests)."""
    return _head(_PROCESS, window) + _list(values)
