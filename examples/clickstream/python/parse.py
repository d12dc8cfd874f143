"""Turns a line ``<user> <page> [<time>]`` into a record keyed by user with the page as value
(and the time, if given, as its event time); other lines go unchanged to the side output
``malformed``. The same operator as ``../parse`` (Rust)."""

import weir

MALFORMED = "malformed"
_ASCII_WHITESPACE = {ord(c): " " for c in "\t\n\x0c\r"}


class ParseClicks(weir.Operator):
    def process(self, ctx, line):
        try:
            text = line.value_str()
        except UnicodeDecodeError:
            text = ""
        fields = [f for f in text.translate(_ASCII_WHITESPACE).split(" ") if f]
        if len(fields) == 2:
            ctx.emit(fields[0], fields[1])
        elif len(fields) == 3 and _is_i64(fields[2]):
            ctx.emit_record(weir.Kind.INSERT, fields[0], int(fields[2]), fields[1])
        else:
            ctx.emit_to(MALFORMED, None, line.value)


def _is_i64(text):
    # As Rust's i64 parse: an optional sign and ASCII digits, in range.
    digits = text[1:] if text[:1] in "+-" else text
    return digits.isascii() and digits.isdigit() and -(2**63) <= int(text) < 2**63


Operator = weir.export(ParseClicks)
