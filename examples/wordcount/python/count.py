"""Counts each word (the record's key) in a value state and emits the new count: an insert
for a word's first occurrence, an update after that. The same operator as ``../count``
(Rust): the two read and write each other's state."""

import weir


class CountWords(weir.Operator):
    def open(self, ctx):
        # Declared once; in process the handle acts on the current record's key.
        self.count = ctx.value_state("count")

    def process(self, ctx, word):
        n = self.count.get(0) + 1
        self.count.set(n)
        kind = weir.Kind.INSERT if n == 1 else weir.Kind.UPDATE_AFTER
        ctx.emit_record(kind, word.key, word.timestamp, n)


Operator = weir.export(CountWords)
