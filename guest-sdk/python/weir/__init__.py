"""weir's guest SDK for Python: stream operators that run as WebAssembly components.

>>> import weir
>>> class CountWords(weir.Operator):
...     def process(self, ctx, record):
...         count = ctx.value_state("count")
...         n = count.get(0) + 1
...         count.set(n)
...         ctx.emit(record.key, str(n))
>>> h = weir.testing.Harness(CountWords)
>>> [o.value for o in h.process([("a", "a"), ("b", "b"), ("a", "a")])]
[b'1', b'1', b'2']

A module that defines an operator ends with ``Operator = weir.export(CountWords)``;
``weir build`` makes it a component. What crosses to the host crosses once per batch, as
``wit/stream.wit`` describes; state values are stored with :mod:`weir.cbor`, the codec every
weir SDK shares, so state outlives a rewrite of the operator in another language.
"""

from . import cbor, testing, window
from ._runtime import (
    Context,
    ListState,
    MapState,
    OpenContext,
    OperatorListState,
    OperatorState,
    ValueState,
)
from .cbor import CodecError
from .operator import Operator
from .types import (
    Kind,
    Level,
    Record,
    Redistribution,
    StateError,
    StateVisibility,
    TimeDomain,
    Timer,
    Ttl,
    TtlTime,
    UpdateType,
    WeirError,
)

__version__ = "0.2.0"

__all__ = [
    "CodecError",
    "Context",
    "Kind",
    "Level",
    "ListState",
    "MapState",
    "OpenContext",
    "Operator",
    "OperatorListState",
    "OperatorState",
    "Record",
    "Redistribution",
    "StateError",
    "StateVisibility",
    "TimeDomain",
    "Timer",
    "Ttl",
    "TtlTime",
    "UpdateType",
    "ValueState",
    "WeirError",
    "cbor",
    "export",
    "testing",
    "window",
]


def export(operator_class):
    """Makes ``operator_class`` (a :class:`weir.Operator` subclass) the component's operator:
    end the module with ``Operator = weir.export(MyOperator)``. Outside a component (tests,
    plain CPython) it returns the class unchanged."""
    if not (isinstance(operator_class, type) and issubclass(operator_class, Operator)):
        raise TypeError(f"weir.export takes a weir.Operator subclass, not {operator_class!r}")
    try:
        import wit_world  # noqa: F401  (present only inside a component)
    except ImportError:
        return operator_class
    from ._guest import export as component_export

    return component_export(operator_class)
