"""Test guest: the state-probe command interpreter of ``tests/guests/state-probe`` (Rust) in
Python, so that the conformance script ``tests/conformance/state.txt`` checks the Python SDK
against the host exactly as it checks the Rust SDK (``tests/e2e/state.rs``; the SDK's own
tests run it through ``weir.testing``).

Each record's key is the state key and its value a command; the probe emits one record with
the same key whose value is the result. State: value "v", list "l", map "m" (all of str);
the ``t`` commands' states have an event-time TTL of 1 s, as in the Rust probe.
"""

import weir

_TTL = weir.Ttl(ms=1000, time=weir.TtlTime.EVENT_TIME)
_TTL_READ = weir.Ttl(ms=1000, time=weir.TtlTime.EVENT_TIME, update=weir.UpdateType.ON_READ_AND_WRITE)


def _list(items):
    return "[" + ",".join(items) + "]"


def _elements(arg):
    return arg.split(",") if arg else []


def _entries(m):
    return "{" + ",".join(f"{k}={val}" for k, val in sorted(m.items())) + "}"


def run(ctx, command):
    cmd, _, arg = command.partition(" ")
    v, l, m = ctx.value_state("v"), ctx.list_state("l"), ctx.map_state("m")
    if cmd == "vset":
        v.set(arg)
    elif cmd == "vget":
        return v.get("none")
    elif cmd == "vclear":
        v.clear()
    elif cmd == "ladd":
        l.add(arg)
    elif cmd == "laddall":
        l.add_all(_elements(arg))
    elif cmd == "lget":
        return _list(l.get())
    elif cmd == "lupdate":
        l.update(_elements(arg))
    elif cmd == "lclear":
        l.clear()
    elif cmd == "mput":
        k, _, value = arg.partition(" ")
        m.put(k, value)
    elif cmd == "mget":
        return m.get(arg, "none")
    elif cmd == "mremove":
        m.remove(arg)
    elif cmd == "mcontains":
        return str(m.contains(arg)).lower()
    elif cmd == "mentries":
        return _entries(m)
    elif cmd == "mkeys":
        return _list(sorted(m.keys()))
    elif cmd == "mvalues":
        return _list(sorted(m.values()))
    elif cmd in ("mfill", "mremovefill"):
        n, _, length = arg.partition(" ")
        n, length = int(n), int(length or 0)
        for i in range(n):
            if cmd == "mfill":
                m.put(f"f{i}", str(i).rjust(length, "."))
            else:
                m.remove(f"f{i}")
    elif cmd == "mvlen":
        value = m.get(arg)
        return "none" if value is None else f"{len(value)} {value.lstrip('.')}"
    elif cmd == "msize":
        return str(len(m))
    elif cmd == "misempty":
        return str(m.is_empty()).lower()
    elif cmd == "mclear":
        m.clear()
    elif cmd == "timer":
        ctx.register_event_timer(int(arg))
    elif cmd in ("tvset", "trset"):
        ctx.value_state(cmd[:2], _TTL if cmd == "tvset" else _TTL_READ).set(arg)
    elif cmd in ("tvget", "trget"):
        return ctx.value_state(cmd[:2], _TTL if cmd == "tvget" else _TTL_READ).get("none")
    elif cmd == "tladd":
        ctx.list_state("tl", _TTL).add(arg)
    elif cmd == "tlget":
        return _list(ctx.list_state("tl", _TTL).get())
    elif cmd == "tmput":
        k, _, value = arg.partition(" ")
        ctx.map_state("tm", _TTL).put(k, value)
    elif cmd == "tmentries":
        return _entries(ctx.map_state("tm", _TTL))
    else:
        raise weir.WeirError(f"unknown command {cmd!r}")
    return "ok"


class StateProbe(weir.Operator):
    def process(self, ctx, record):
        ctx.emit(record.key, run(ctx, record.value_str()))

    def on_timer(self, ctx, timer):
        ctx.emit(timer.key, f"fired {timer.timestamp}")


Operator = weir.export(StateProbe)
