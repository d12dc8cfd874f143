"""Test guest: the process-window function of ``tests/guests/window-process`` (Rust) in
Python. A fired window of key ``k`` becomes the record ``k``, ``<start>,<end>,<count>:<sum>``
of its records' values (decimal integers; a value that is not one adds its bytes).
Config ``{ fail = "error" }`` fails every window it fires, as a function with a bug would."""

import weir
from weir.window import ProcessWindowFunction, process_window


def _number(value):
    try:
        return int(value.decode().strip())
    except ValueError:
        return sum(value)


class CountSum(ProcessWindowFunction):
    def open(self, ctx):
        self.fail = ctx.config.get("fail")

    def process(self, ctx, key, window, values):
        if self.fail:
            raise ValueError("this window function fails")
        total = sum(_number(v) for v in values)
        ctx.emit(key, f"{window.start},{window.end},{len(values)}:{total}")


Operator = weir.export(process_window(CountSum))
