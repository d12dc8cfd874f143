"""The Python word count's operators, run natively with ``weir.testing`` (pytest)."""

import pytest

import weir
from weir.testing import Harness, Input

from count import CountWords
from split import Split


def words(out):
    return [(o.key_str, o.value_str) for o in out]


def test_splits_on_ascii_whitespace():
    out = Harness(Split).process(["To be,\tor  not\n", "", "   ", "to BE\x0bx"])
    assert words(out) == [
        ("To", "To"),
        ("be,", "be,"),
        ("or", "or"),
        ("not", "not"),
        ("to", "to"),
        ("BE\x0bx", "BE\x0bx"),
    ]


def test_lowercase_config():
    out = Harness(Split, config={"lowercase": True}).process(["Hello WORLD Straße ΟΔΟΣ"])
    assert words(out) == [
        ("hello", "hello"),
        ("world", "world"),
        ("straße", "straße"),
        ("οδοσ", "οδοσ"),
    ]


def test_rejects_bad_config_and_non_utf8():
    with pytest.raises(weir.WeirError, match="lowercase must be true or false"):
        Harness(Split, config={"lowercase": "yes"}).process(["x"])
    with pytest.raises(weir.WeirError, match="UnicodeDecodeError"):
        Harness(Split).process([Input(b"\xff ")])


def test_counts_over_two_batches_and_a_restart():
    h = Harness(CountWords)
    out = h.process([("to", "to"), ("be", "be"), ("to", "to")])
    assert [(o.key_str, o.value_str, o.kind) for o in out] == [
        ("to", "1", weir.Kind.INSERT),
        ("be", "1", weir.Kind.INSERT),
        ("to", "2", weir.Kind.UPDATE_AFTER),
    ]
    h.restart()
    out = h.process([Input("be", key="be", timestamp=7)])
    assert [(o.value_str, o.timestamp) for o in out] == [("2", 7)]
    assert h.value_state("count", "to") == 2
