"""The runtime through the harness: state of every kind against a model, timers, output,
errors, operator state."""

import random

import pytest

import weir
from weir.testing import Harness, Input


class Script(weir.Operator):
    """Runs the operation each record's value names on the record's key (a test driver)."""

    def process(self, ctx, record):
        op, *args = record.value_str().split(" ")
        getattr(self, op)(ctx, *args)

    def vset(self, ctx, v):
        ctx.value_state("v").set(int(v))

    def vget(self, ctx):
        ctx.emit(ctx.current_key, repr(ctx.value_state("v").get()))

    def vclear(self, ctx):
        ctx.value_state("v").clear()

    def ladd(self, ctx, v):
        ctx.list_state("l").add(int(v))

    def lget(self, ctx):
        ctx.emit(ctx.current_key, repr(ctx.list_state("l").get()))

    def lupdate(self, ctx, *vs):
        ctx.list_state("l").update([int(v) for v in vs])

    def lclear(self, ctx):
        ctx.list_state("l").clear()

    def mput(self, ctx, k, v):
        ctx.map_state("m").put(int(k), "v" * int(v))

    def mremove(self, ctx, k):
        ctx.map_state("m").remove(int(k))

    def mget(self, ctx, k):
        ctx.emit(ctx.current_key, repr(ctx.map_state("m").get(int(k))))

    def mitems(self, ctx):
        ctx.emit(ctx.current_key, repr(ctx.map_state("m").items()))

    def mempty(self, ctx):
        ctx.emit(ctx.current_key, repr(ctx.map_state("m").is_empty()))

    def mclear(self, ctx):
        ctx.map_state("m").clear()


class Model:
    """What the operations should do, computed independently of the SDK."""

    def __init__(self):
        self.v, self.l, self.m = {}, {}, {}

    def apply(self, key, op, args):
        v, lst, m = self.v, self.l.setdefault(key, []), self.m.setdefault(key, {})
        if op == "vset":
            v[key] = int(args[0])
        elif op == "vget":
            return repr(v.get(key))
        elif op == "vclear":
            v.pop(key, None)
        elif op == "ladd":
            lst.append(int(args[0]))
        elif op == "lget":
            return repr(list(lst))
        elif op == "lupdate":
            lst[:] = [int(a) for a in args]
        elif op == "lclear":
            lst.clear()
        elif op == "mput":
            m[int(args[0])] = "v" * int(args[1])
        elif op == "mremove":
            m.pop(int(args[0]), None)
        elif op == "mget":
            return repr(m.get(int(args[0])))
        elif op == "mitems":
            return repr(sorted(m.items()))
        elif op == "mempty":
            return repr(not m)
        elif op == "mclear":
            m.clear()
        return None


def random_op(rng, big):
    op = rng.choice(
        ["vset", "vget", "vclear", "ladd", "ladd", "lget", "lupdate", "lclear"]
        + ["mput"] * 4
        + ["mremove", "mget", "mget", "mitems", "mempty"]
        + ([] if big and rng.random() < 0.9 else ["mclear"])
    )
    k = str(rng.randrange(40))
    # Long values make some maps larger than the 16 KiB the host loads whole.
    size = str(rng.randrange(2000 if big else 20))
    args = {
        "vset": [k],
        "ladd": [k],
        "lupdate": [str(rng.randrange(9)) for _ in range(rng.randrange(4))],
        "mput": [k, size],
        "mremove": [k],
        "mget": [k],
    }.get(op, [])
    return op, args


@pytest.mark.parametrize("big", [False, True], ids=["small maps", "large maps"])
def test_state_of_every_kind_matches_a_model_across_batches_and_restarts(big):
    rng = random.Random(3 if big else 4)
    h, model = Harness(Script), Model()
    for batch in range(150):
        records, want = [], []
        for _ in range(rng.randrange(1, 30)):
            key = rng.choice("abcde")
            op, args = random_op(rng, big)
            records.append((key, " ".join([op, *args])))
            out = model.apply(key, op, args)
            if out is not None:
                want.append((key, out))
        got = [(o.key_str, o.value_str) for o in h.process(records)]
        assert got == want, f"batch {batch}"
        if batch % 25 == 24:
            h.restart()
    for key in "abcde":
        assert h.value_state("v", key) == model.v.get(key)
        assert h.list_state("l", key) == model.l.get(key, [])
        assert h.map_state("m", key) == sorted(model.m.get(key, {}).items())
    if big:
        calls = h.backend.calls
        assert calls["map_get"] > 50 and calls["map_entries"] > 20, calls


def test_a_batch_crosses_to_the_host_a_bounded_number_of_times():
    class Counter(weir.Operator):
        def process(self, ctx, record):
            s = ctx.value_state("n")
            s.set(s.get(0) + 1)
            ctx.list_state("seen").add(record.value_str())
            ctx.emit(record.key, "x")

    h = Harness(Counter)
    h.process([(str(i % 7), str(i)) for i in range(1000)])
    # One load of the value state (the list is only appended to), one store per state, and
    # output in 64 KiB pieces.
    assert h.backend.calls == {"load": 1, "store": 2, "map_get": 0, "map_entries": 0, "emit": 1}
    assert h.value_state("n", "3") == 143
    assert h.list_state("seen", "0")[:3] == ["0", "7", "14"]


def test_timers_fire_in_order_once_per_key_and_time_and_delete_replace_is_one_change():
    class Session(weir.Operator):
        def process(self, ctx, record):
            last = ctx.value_state("last")
            previous = last.get()
            if previous is not None:
                ctx.delete_event_timer(previous + 100)
            last.set(record.timestamp)
            ctx.register_event_timer(record.timestamp + 100)
            ctx.register_processing_time_timer(1_000)

        def on_timer(self, ctx, timer):
            ctx.emit(timer.key, f"{timer.domain.name} {timer.timestamp}")
            ctx.value_state("last").clear()

    h = Harness(Session)
    h.process([Input("", key="a", timestamp=t) for t in (10, 20, 50)])
    h.process([Input("", key="b", timestamp=5)])
    assert h.event_timers("a") == [150]
    assert h.event_timers("b") == [105]
    out = h.fire_event_timers_up_to(140)
    assert [(o.key_str, o.value_str, o.timestamp) for o in out] == [("b", "EVENT_TIME 105", 105)]
    out = h.fire_event_timers_up_to(1_000)
    assert [(o.key_str, o.value_str) for o in out] == [("a", "EVENT_TIME 150")]
    assert h.value_state("last", "a") is None
    out = h.set_processing_time(1_000)
    assert sorted((o.key_str, o.value_str, o.timestamp) for o in out) == [
        ("a", "PROCESSING_TIME 1000", None),
        ("b", "PROCESSING_TIME 1000", None),
    ]


def test_a_timer_deleted_by_a_callback_of_the_same_firing_does_not_fire():
    class Cancel(weir.Operator):
        def process(self, ctx, record):
            for t in record.value_str().split():
                ctx.register_event_timer(int(t))

        def on_timer(self, ctx, timer):
            ctx.emit(timer.key, str(timer.timestamp))
            ctx.delete_event_timer(200)

    h = Harness(Cancel)
    h.process([Input("100 200", key="k")])
    # The timer at 100 deletes the one at 200, due in the same advance.
    assert [o.value_str for o in h.fire_event_timers_up_to(300)] == ["100"]
    assert h.event_timers("k") == []


def test_output_kinds_timestamps_side_outputs_and_second_input():
    class Route(weir.Operator):
        def process(self, ctx, record):
            if record.input == 1:
                ctx.emit_to("second", record.key, record.value)
            elif record.value == b"bad":
                ctx.emit_to("malformed", None, record.value)
            else:
                ctx.emit(record.key, record.value)
                ctx.emit_record(weir.Kind.DELETE, b"k", 7, 42)

    h = Harness(Route)
    out = h.process([Input("ok", key="a", timestamp=3), "bad"])
    assert [(o.side_output, o.kind, o.key, o.timestamp, o.value) for o in out] == [
        (None, weir.Kind.INSERT, b"a", 3, b"ok"),
        (None, weir.Kind.DELETE, b"k", 7, b"42"),
        ("malformed", weir.Kind.INSERT, None, None, b"bad"),
    ]
    out = h.process_second([("x", "y")])
    assert [(o.side_output, o.key, o.value) for o in out] == [("second", b"x", b"y")]


def test_a_failing_hook_names_the_record_the_key_and_where():
    class Fails(weir.Operator):
        def process(self, ctx, record):
            if record.value == b"boom":
                raise ValueError("cannot parse")
            ctx.emit(None, record.value)

    h = Harness(Fails)
    with pytest.raises(weir.WeirError) as e:
        h.process([("k1", "fine"), ("k2", "boom")])
    message = str(e.value)
    assert "record 1 of the batch (key 'k2')" in message
    assert "ValueError: cannot parse" in message
    assert "test_operators.py" in message and "in process" in message


def test_keyed_state_and_timers_need_a_key():
    class Unkeyed(weir.Operator):
        def process(self, ctx, record):
            ctx.value_state("x").get()

    with pytest.raises(weir.WeirError, match="no current key.*key_by"):
        Harness(Unkeyed).process(["v"])


def test_a_state_name_keeps_its_kind():
    class Mixed(weir.Operator):
        def process(self, ctx, record):
            ctx.value_state("s").set(1)
            ctx.list_state("s").add(1)

    with pytest.raises(weir.WeirError, match="'s' is a value state; it cannot also be"):
        Harness(Mixed).process([("k", "v")])


def test_values_outside_the_codec_are_refused_with_the_state_name():
    class Stores(weir.Operator):
        def process(self, ctx, record):
            ctx.value_state("when").set(object())

    with pytest.raises(weir.WeirError, match="state 'when': cannot store a object"):
        Harness(Stores).process([("k", "v")])


def test_operator_state_config_logs_and_restart():
    class Offsets(weir.Operator):
        def open(self, ctx):
            self.prefix = ctx.config["prefix"]
            self.total = ctx.operator_state("total")
            ctx.info(f"subtask {ctx.subtask_index} of {ctx.parallelism}")

        def process(self, ctx, record):
            self.total.set(self.total.get(0) + 1)
            ctx.emit(None, f"{self.prefix}{self.total.get()}")

        def close(self, ctx):
            ctx.emit(None, "closed")

    h = Harness(Offsets, config={"prefix": "#"}, parallelism=3, subtask_index=2)
    assert [o.value for o in h.process(["a", "b"])] == [b"#1", b"#2"]
    h.restart()
    assert [o.value for o in h.process(["c"])] == [b"#3"]
    assert h.operator_state("total") == 3
    assert [o.value for o in h.close()] == [b"closed"]
    assert h.logs == [(weir.Level.INFO, "subtask 2 of 3")] * 2


def test_ttl_is_declared_with_the_state():
    seen = []

    class Declares(weir.Operator):
        def process(self, ctx, record):
            ttl = weir.Ttl(ms=5_000, update=weir.UpdateType.ON_READ_AND_WRITE)
            ctx.value_state("recent", ttl=ttl).set(1)
            seen.append(ttl)

    h = Harness(Declares)
    h.process([("k", "v")])
    assert h.value_state("recent", "k") == 1
    assert seen[0].ttl_ms == 5_000
    with pytest.raises(ValueError, match="at least 1 ms"):
        weir.Ttl(ms=0)


def test_state_declared_in_open_acts_on_the_current_key_in_process_and_on_timer():
    class Declared(weir.Operator):
        def open(self, ctx):
            self.count = ctx.value_state("count")
            self.seen = ctx.list_state("seen", ttl=weir.Ttl(ms=60_000))
            self.by_value = ctx.map_state("by_value")

        def process(self, ctx, record):
            n = self.count.get(0) + 1
            self.count.set(n)
            self.seen.add(record.value_str())
            self.by_value.put(record.value_str(), n)
            # The same state reached by name.
            assert ctx.value_state("count").get() == n
            ctx.register_event_timer(100)

        def on_timer(self, ctx, timer):
            ctx.emit(timer.key, f"{self.count.get()} {self.seen.get()} {self.by_value.items()}")

    h = Harness(Declared)
    h.process([("a", "x"), ("b", "y"), ("a", "z")])
    h.restart()  # open runs again and declares the states of the new instance
    h.process([("b", "w")])
    assert h.value_state("count", "a") == 2 and h.value_state("count", "b") == 2
    out = h.fire_event_timers_up_to(100)
    assert sorted((o.key_str, o.value_str) for o in out) == [
        ("a", "2 ['x', 'z'] [('x', 1), ('z', 2)]"),
        ("b", "2 ['y', 'w'] [('w', 2), ('y', 1)]"),
    ]


def test_a_state_declared_in_open_two_ways_fails_open():
    class Conflicting(weir.Operator):
        def open(self, ctx):
            ctx.value_state("s")
            ctx.list_state("s")

    with pytest.raises(weir.WeirError, match="open.*'s' is a value state; it cannot also be"):
        Harness(Conflicting).process([("k", "v")])
