"""Splits each line into words on whitespace; each word is emitted keyed by itself.

``config = { lowercase = true }`` lowercases the words first. The same operator as
``../split`` (Rust), with the same output.
"""

import weir


class Split(weir.Operator):
    def open(self, ctx):
        config = ctx.config
        unknown = set(config) - {"lowercase"}
        if unknown:
            raise weir.WeirError(f"unknown config keys {sorted(unknown)}; known: lowercase")
        lowercase = config.get("lowercase", False)
        if not isinstance(lowercase, bool):
            raise weir.WeirError(f"config: lowercase must be true or false, not {lowercase!r}")
        self.lowercase = lowercase

    def process(self, ctx, line):
        for word in line.value_str().translate(_ASCII_WHITESPACE).split(" "):
            if not word:
                continue
            if self.lowercase:
                word = _lower(word)
            ctx.emit(word, word)


# The Rust operator splits on ASCII whitespace (space, tab, LF, FF, CR), not on all that
# Python's str.split() does.
_ASCII_WHITESPACE = {ord(c): " " for c in "\t\n\x0c\r"}


def _lower(word):
    # Character by character, as Rust's char::to_lowercase: str.lower() would turn a final
    # capital sigma into ς.
    if "Σ" in word:
        return "".join(c.lower() for c in word)
    return word.lower()


Operator = weir.export(Split)
