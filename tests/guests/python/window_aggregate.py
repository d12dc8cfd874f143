"""Test guest: the window aggregate function of ``tests/guests/window-aggregate`` (Rust) in
Python. A window's result is ``<count>:<sum>`` of its records' values (decimal integers);
accumulators merge, so it serves session windows."""

import weir
from weir.window import AggregateFunction, aggregate


class CountSum(AggregateFunction):
    def create(self):
        return [0, 0]

    def add(self, acc, value):
        return [acc[0] + 1, acc[1] + int(value)]

    def merge(self, acc, other):
        return [acc[0] + other[0], acc[1] + other[1]]

    def result(self, acc):
        return f"{acc[0]}:{acc[1]}"


Operator = weir.export(aggregate(CountSum))
