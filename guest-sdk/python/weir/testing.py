"""Run an operator in plain CPython (pytest, no WebAssembly): :class:`Harness`.

The harness drives the same runtime a component runs (batch decoding, per-batch state
caches, output buffering, timer changes) against an in-memory host with the host's state
semantics. It does not enforce state TTL (the host's state backends do) and does not
partition keys over subtasks.

>>> import weir
>>> from weir.testing import Harness, Input
>>> class Alarm(weir.Operator):
...     def process(self, ctx, record):
...         ctx.register_event_timer(record.timestamp + 1000)
...     def on_timer(self, ctx, timer):
...         ctx.emit(timer.key, f"due {timer.timestamp}")
>>> h = Harness(Alarm)
>>> h.process([Input("x", key="k", timestamp=5)])
[]
>>> h.fire_event_timers_up_to(2000)[0].value
b'due 1005'
"""

import json
from dataclasses import dataclass
from typing import Optional

from . import _wire as w
from ._runtime import LIST, MAP, VALUE, Instance
from .cbor import decode
from .types import Kind, Level, WeirError

# A map whose load encoding is larger than this is sent as LARGE, as the host does.
MAP_LOAD_LIMIT = 16 * 1024


@dataclass
class Input:
    """A record to feed the operator: ``Input(value, key=None, timestamp=None,
    kind=Kind.INSERT)``; values and keys are bytes or str. A plain str or bytes is an
    unkeyed record, a ``(key, value)`` tuple a keyed one."""

    value: object
    key: object = None
    timestamp: Optional[int] = None
    kind: Kind = Kind.INSERT


@dataclass
class Output:
    """A record the operator emitted."""

    key: Optional[bytes]
    value: bytes
    timestamp: Optional[int]
    kind: Kind
    side_output: Optional[str]

    @property
    def key_str(self):
        return None if self.key is None else self.key.decode()

    @property
    def value_str(self):
        return self.value.decode()


def _b(v):
    if v is None:
        return None
    return v.encode() if isinstance(v, str) else bytes(v)


def _input(item):
    if isinstance(item, Input):
        return item
    if isinstance(item, tuple):
        key, value = item
        return Input(value, key=key)
    return Input(item)


class MemoryBackend:
    """The in-memory host: keyed state, timers, output, logs and operator state."""

    def __init__(self):
        self.states = []  # (name, kind, {key: stored})
        self.timers = set()  # (domain, timestamp, key)
        self.watermark = None
        self.processing_time = 0
        self.output = []
        self.logs = []
        self.operator_states = []  # [name, mode, elements]
        self.calls = {"load": 0, "store": 0, "map_get": 0, "map_entries": 0, "emit": 0}

    def state(self, name):
        for s in self.states:
            if s[0] == name:
                return s
        return None

    def declare_state(self, kind, name, ttl):
        for i, s in enumerate(self.states):
            if s[0] == name:
                if s[1] != kind:
                    raise WeirError(f"state {name!r} is a {s[1]} state, not a {kind} state")
                return i
        self.states.append((name, kind, {}))
        return len(self.states) - 1

    def load(self, handle, keys):
        self.calls["load"] += 1
        _, kind, data = self.states[handle]
        out = bytearray()
        for key in keys:
            stored = data.get(key)
            if kind == VALUE:
                if stored is None:
                    out += w.U32.pack(w.NONE)
                else:
                    w.put_bytes(out, stored)
            elif kind == LIST:
                items = stored or []
                out += w.U32.pack(len(items))
                for item in items:
                    w.put_bytes(out, item)
            else:
                entries = stored or {}
                size = 4 + sum(8 + len(k) + len(v) for k, v in entries.items())
                if size > MAP_LOAD_LIMIT:
                    out += w.U32.pack(w.LARGE)
                    out += w.U32.pack(len(entries))
                else:
                    _put_entries(out, entries)
        return bytes(out)

    def map_get(self, handle, keys, slot, map_key):
        self.calls["map_get"] += 1
        return (self.states[handle][2].get(keys[slot]) or {}).get(bytes(map_key))

    def map_entries(self, handle, keys, slot):
        self.calls["map_entries"] += 1
        out = bytearray()
        _put_entries(out, self.states[handle][2].get(keys[slot]) or {})
        return bytes(out)

    def store(self, handle, keys, changes):
        self.calls["store"] += 1
        _, kind, data = self.states[handle]
        pos = 0
        while pos < len(changes):
            slot, op = w.U32.unpack_from(changes, pos)[0], changes[pos + 4]
            pos += 5
            key = keys[slot]
            if op == w.CLEAR:
                data.pop(key, None)
            elif kind == VALUE:
                data[key], pos = w.read_bytes(changes, pos)
            elif kind == LIST:
                (n,) = w.U32.unpack_from(changes, pos)
                pos += 4
                items = []
                for _ in range(n):
                    item, pos = w.read_bytes(changes, pos)
                    items.append(item)
                if op == w.LIST_REPLACE:
                    data[key] = items
                else:
                    data.setdefault(key, []).extend(items)
                if not data[key]:
                    del data[key]
            else:
                k, pos = w.read_bytes(changes, pos)
                if op == w.MAP_PUT:
                    v, pos = w.read_bytes(changes, pos)
                    data.setdefault(key, {})[k] = v
                else:
                    m = data.get(key)
                    if m is not None:
                        m.pop(k, None)
                        if not m:
                            del data[key]

    def emit(self, records):
        self.calls["emit"] += 1
        for side, kind, key, ts, value in w.read_output(records):
            self.output.append(Output(key, value, ts, Kind(kind), side))

    def update_timers(self, keys, changes):
        for op, slot, ts in w.read_timer_ops(changes):
            timer = (0 if op < 2 else 1, ts, keys[slot])
            if op in (w.REGISTER_EVENT, w.REGISTER_PROCESSING):
                self.timers.add(timer)
            else:
                self.timers.discard(timer)

    def current_watermark(self):
        return self.watermark

    def current_processing_time(self):
        return self.processing_time

    def log(self, level, message):
        self.logs.append((Level(level), message))

    def declare_operator_state(self, name, mode):
        for i, s in enumerate(self.operator_states):
            if s[0] == name:
                return i
        self.operator_states.append([name, mode, []])
        return len(self.operator_states) - 1

    def get_operator_state(self, handle):
        return list(self.operator_states[handle][2])

    def set_operator_state(self, handle, elements):
        self.operator_states[handle][2] = [bytes(e) for e in elements]

    def take_due(self, domain, up_to):
        due = sorted(t for t in self.timers if t[0] == domain and t[1] <= up_to)
        self.timers.difference_update(due)
        return due


def _key_table(keys):
    """A buffer starting with the key table of ``keys`` (``None`` skipped, each key once),
    and the slot of each key."""
    slots = {}
    for k in keys:
        if k is not None and k not in slots:
            slots[k] = len(slots)
    buf = bytearray(w.U32.pack(len(slots)))
    for k in slots:
        w.put_bytes(buf, k)
    return buf, slots


def _put_entries(out, entries):
    out += w.U32.pack(len(entries))
    for k in sorted(entries):
        w.put_bytes(out, k)
        w.put_bytes(out, entries[k])


class Harness:
    """Runs ``operator_class`` natively against an in-memory host.

    ``config`` (a dict or JSON text), ``parallelism``, ``subtask_index`` and ``operator_uid``
    are what ``open`` sees. Each ``process`` call is one batch; it returns what the operator
    emitted. State survives :meth:`restart` (a new instance, as after a failure).
    """

    def __init__(
        self, operator_class, config=None, parallelism=1, subtask_index=0, operator_uid="op"
    ):
        self.operator_class = operator_class
        if config is not None and not isinstance(config, str):
            config = json.dumps(config)
        self.info = {
            "operator_uid": operator_uid,
            "subtask_index": subtask_index,
            "parallelism": parallelism,
            "config": config or "{}",
        }
        self.backend = MemoryBackend()
        self._instance = None

    def instance(self):
        if self._instance is None:
            instance = Instance(self.operator_class(), self.backend, self.info)
            instance.open()
            self._instance = instance
        return self._instance

    def _take(self):
        out, self.backend.output = self.backend.output, []
        return out

    def process(self, records, input=0):
        """Feeds ``records`` (``Input``, str/bytes or ``(key, value)``) as one batch."""
        inputs = [_input(r) for r in records]
        buf, slots = _key_table(_b(i.key) for i in inputs)
        buf += w.U32.pack(len(inputs))
        for i in inputs:
            k = _b(i.key)
            hdr = int(i.kind) | (w.SECOND_INPUT if input else 0)
            hdr |= (w.HAS_KEY if k is not None else 0) | (
                w.HAS_TIMESTAMP if i.timestamp is not None else 0
            )
            buf.append(hdr)
            if k is not None:
                buf += w.U32.pack(slots[k])
            if i.timestamp is not None:
                buf += w.I64.pack(i.timestamp)
            w.put_bytes(buf, _b(i.value))
        try:
            self.instance().process(bytes(buf))
        finally:
            out = self._take()
        return out

    def process_second(self, records):
        """Feeds ``records`` as one batch of the operator's second input."""
        return self.process(records, input=1)

    def _fire(self, domain, up_to):
        outputs = []
        for _ in range(10_000):
            due = self.backend.take_due(domain, up_to)
            if not due:
                return outputs
            buf, slots = _key_table(key for _, _, key in due)
            buf += w.U32.pack(len(due))
            for d, ts, key in due:
                buf.append(d)
                buf += w.U32.pack(slots[key])
                buf += w.I64.pack(ts)
            try:
                self.instance().on_timers(bytes(buf))
            finally:
                outputs.extend(self._take())
        raise RuntimeError(f"timers keep registering timers at or before {up_to}")

    def fire_event_timers_up_to(self, timestamp):
        """Moves the watermark to ``timestamp`` and fires the event-time timers it passes, in
        timestamp order; returns what they emitted."""
        if self.backend.watermark is None or timestamp > self.backend.watermark:
            self.backend.watermark = timestamp
        return self._fire(0, timestamp)

    def set_processing_time(self, ms):
        """Sets the clock to ``ms`` and fires the processing-time timers due by then."""
        self.backend.processing_time = ms
        return self._fire(1, ms)

    def close(self):
        """Calls ``close`` and drops the instance; returns what it emitted."""
        try:
            self.instance().close()
        finally:
            self._instance = None
            out = self._take()
        return out

    def restart(self):
        """Drops the instance (as a failure does); state and timers stay."""
        self._instance = None

    # What the host holds, decoded.

    def _stored(self, name, key):
        s = self.backend.state(name)
        return None if s is None else s[2].get(_b(key))

    def value_state(self, name, key):
        stored = self._stored(name, key)
        return None if stored is None else decode(stored)

    def list_state(self, name, key):
        return [decode(i) for i in self._stored(name, key) or []]

    def map_state(self, name, key):
        entries = self._stored(name, key) or {}
        return [(decode(k), decode(entries[k])) for k in sorted(entries)]

    def operator_state(self, name):
        for n, _, elements in self.backend.operator_states:
            if n == name and elements:
                return decode(elements[0])
        return None

    def operator_list_state(self, name):
        for n, _, elements in self.backend.operator_states:
            if n == name:
                return [decode(e) for e in elements]
        return []

    def event_timers(self, key):
        return sorted(ts for d, ts, k in self.backend.timers if d == 0 and k == _b(key))

    def processing_time_timers(self, key):
        return sorted(ts for d, ts, k in self.backend.timers if d == 1 and k == _b(key))

    @property
    def logs(self):
        return list(self.backend.logs)


__all__ = ["Harness", "Input", "MemoryBackend", "Output"]
