"""One operator instance: decodes what the host sends, runs the operator's hooks, and sends back
state changes, timer changes and output, once per batch.

The component glue (``_guest.py``) and the test harness (``testing.py``) both drive an
:class:`Instance`; only the backend differs (the WIT imports, or an in-memory store). Keyed
state is "state in, diff out" per batch, as ``wit/stream.wit`` says: the first read of a state
in a batch loads it for every key of the batch in one call, reads and writes then hit a cache
here, and each changed state goes back in one ``store`` call at the end of the batch.
"""

import json
import traceback

from . import _wire as w
from .cbor import CodecError, decode, encode
from .types import (
    Kind,
    Level,
    Record,
    Redistribution,
    StateError,
    TimeDomain,
    Timer,
    Ttl,
    WeirError,
)

# Output goes to the host whenever this much is buffered, and at the end of a batch.
OUTPUT_FLUSH_BYTES = 64 * 1024

VALUE, LIST, MAP = "value", "list", "map"
# Indexed by the header's kind bits: no enum lookup per record.
_KINDS = tuple(Kind)
_REMOVED = object()


def describe_key(key):
    if key is None:
        return "without key"
    text = bytes(key).decode(errors="replace")
    short = text[:64]
    return f"key {short!r}" + ("…" if len(short) < len(text) else "")


def _describe_record(index, key, _value):
    """What a failure in ``process`` names as the record it was at (a window function's
    operator names the window instead: ``_describe_input``)."""
    return f"record {index} of the batch ({describe_key(key)})"


def _where(e):
    """The innermost frame of ``e``'s traceback: where the operator raised it."""
    frames = traceback.extract_tb(e.__traceback__)
    if not frames:
        return ""
    f = frames[-1]
    return f" (at {f.filename}:{f.lineno} in {f.name})"


def failure(e, what):
    """The message the host gets for exception ``e`` raised while handling ``what``."""
    if isinstance(e, WeirError):
        return f"{what}: {e}"
    return f"{what}: {type(e).__name__}: {e}{_where(e)}"


def _bytes(v):
    """``v`` as bytes if it is bytes or text, else ``None``."""
    if isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    return None


def _as_bytes(v, what):
    b = _bytes(v)
    if b is None:
        raise TypeError(f"{what} must be bytes or str, not {type(v).__name__}")
    return b


def _value_bytes(v):
    b = _bytes(v)
    return str(v).encode() if b is None else b


class _Entry:
    """A declared keyed state and its cache for the current batch."""

    __slots__ = (
        "name",
        "kind",
        "ttl",
        "handle",
        "epoch",
        "loaded",
        "changes",
        "fetched",
    )

    def __init__(self, name, kind, ttl, handle):
        self.name, self.kind, self.ttl, self.handle = name, kind, ttl, handle
        self.epoch = -1
        self.loaded = None  # per key slot, once loaded in this batch
        self.changes = {}  # slot -> this batch's changes, in the order slots were first changed
        self.fetched = {}  # map state: slot -> {encoded map key: stored value or None}


class Core:
    """What the hooks reach through their context: the backend and this batch's buffers."""

    def __init__(self, backend):
        self.backend = backend
        self.states = {}
        self.operator_states = {}
        self.epoch = 0
        self.keys = []
        self.out = bytearray()
        self.timer_ops = {}

    def begin(self, keys):
        self.epoch += 1
        self.keys = keys
        self.out.clear()
        self.timer_ops.clear()

    def entry(self, name, kind, ttl):
        e = self.states.get(name)
        if e is None:
            handle = self.backend.declare_state(kind, name, ttl)
            e = self.states[name] = _Entry(name, kind, ttl, handle)
        elif e.kind != kind:
            raise StateError(
                f"state {name!r} is a {e.kind} state; it cannot also be used as a {kind} "
                "state (give the new one another name)"
            )
        elif e.ttl != ttl:
            raise StateError(
                f"state {name!r} was declared with ttl {e.ttl}, now with {ttl}; declare it the "
                "same way everywhere"
            )
        if e.epoch != self.epoch:
            e.epoch = self.epoch
            e.loaded = None
            e.changes = {}
            e.fetched = {}
        return e

    def load(self, e):
        buf = self.backend.load(e.handle, self.keys)
        n = len(self.keys)
        pos = 0
        loaded = []
        try:
            if e.kind == VALUE:
                for _ in range(n):
                    v, pos = w.read_opt_bytes(buf, pos)
                    loaded.append(v)
            elif e.kind == LIST:
                for _ in range(n):
                    (count,) = w.U32.unpack_from(buf, pos)
                    pos += 4
                    items = []
                    for _ in range(count):
                        item, pos = w.read_bytes(buf, pos)
                        items.append(item)
                    loaded.append(items)
            else:
                for _ in range(n):
                    entries, pos = _read_map(buf, pos, allow_large=True)
                    loaded.append(entries)
            w.check_end(buf, pos, f"{e.kind}-state load")
        except Exception as x:
            raise w.MalformedBuffer(f"state {e.name!r}: the host sent a malformed load: {x}")
        e.loaded = loaded
        return loaded

    def timer(self, op, slot, timestamp, domain):
        self.timer_ops[(slot, domain, timestamp)] = op

    def emit(self, side_output, kind, key, timestamp, value):
        out = self.out
        w.put_output(out, side_output, kind, key, timestamp, value)
        if len(out) > OUTPUT_FLUSH_BYTES:
            self.backend.emit(bytes(out))
            out.clear()

    def finish(self):
        """Sends this batch's state changes, timer changes and the rest of the output."""
        backend = self.backend
        for e in self.states.values():
            if e.epoch == self.epoch and e.changes:
                backend.store(e.handle, self.keys, _changes(e))
        if self.timer_ops:
            buf = bytearray()
            for (slot, _, ts), op in self.timer_ops.items():
                w.put_timer_op(buf, op, slot, ts)
            self.timer_ops.clear()
            backend.update_timers(self.keys, bytes(buf))
        if self.out:
            backend.emit(bytes(self.out))
            self.out.clear()


def _read_map(buf, pos, allow_large):
    (count,) = w.U32.unpack_from(buf, pos)
    pos += 4
    if count == w.LARGE and allow_large:
        (lower_bound,) = w.U32.unpack_from(buf, pos)
        return lower_bound, pos + 4
    entries = {}
    for _ in range(count):
        k, pos = w.read_bytes(buf, pos)
        v, pos = w.read_bytes(buf, pos)
        entries[k] = v
    return entries, pos


def _changes(e):
    """The store buffer of state ``e``'s changes in this batch."""
    out = bytearray()
    if e.kind == VALUE:
        for slot, v in e.changes.items():
            if v is None:
                w.put_slot_op(out, slot, w.CLEAR)
            else:
                w.put_slot_op(out, slot, w.VALUE_SET)
                w.put_bytes(out, v)
    elif e.kind == LIST:
        for slot, (replaced, items) in e.changes.items():
            if replaced and not items:
                w.put_slot_op(out, slot, w.CLEAR)
                continue
            if not items:
                continue
            w.put_slot_op(out, slot, w.LIST_REPLACE if replaced else w.LIST_APPEND)
            out += w.U32.pack(len(items))
            for item in items:
                w.put_bytes(out, item)
    else:
        for slot, (cleared, overlay) in e.changes.items():
            if cleared:
                w.put_slot_op(out, slot, w.CLEAR)
            for k, v in overlay.items():
                if v is _REMOVED:
                    if not cleared:
                        w.put_slot_op(out, slot, w.MAP_REMOVE)
                        w.put_bytes(out, k)
                else:
                    w.put_slot_op(out, slot, w.MAP_PUT)
                    w.put_bytes(out, k)
                    w.put_bytes(out, v)
    return bytes(out)


def _decode_state(e, data):
    try:
        return decode(data)
    except CodecError as x:
        raise StateError(
            f"state {e.name!r} holds a value this SDK cannot read ({x}); was it written with "
            "another codec?"
        ) from None


def _encode_state(e, value):
    try:
        return encode(value)
    except CodecError as x:
        raise StateError(f"state {e.name!r}: {x}") from None


class _Keyed:
    """A handle on keyed state ``name``: each call acts on the current key."""

    __slots__ = ("_ctx", "_name", "_ttl")
    _kind = None

    def __init__(self, ctx, name, ttl):
        self._ctx, self._name, self._ttl = ctx, name, ttl

    def _at(self):
        ctx = self._ctx
        slot = ctx._slot
        if slot is None:
            raise StateError(
                f"{self._kind} state {self._name!r} is keyed, but there is no current key: "
                "key the stream (edge = \"key_by\") before this operator, and use keyed state "
                "in process and on_timer only"
            )
        return ctx._core.entry(self._name, self._kind, self._ttl), slot

    def __repr__(self):
        return f"{type(self).__name__}({self._name!r})"


class ValueState(_Keyed):
    """One value per key (Flink's ``ValueState``)."""

    __slots__ = ()
    _kind = VALUE

    def get(self, default=None):
        """The current key's value, or ``default`` if it has none."""
        e, slot = self._at()
        if slot in e.changes:
            data = e.changes[slot]
        else:
            loaded = e.loaded
            if loaded is None:
                loaded = self._ctx._core.load(e)
            data = loaded[slot]
        return default if data is None else _decode_state(e, data)

    def set(self, value):
        """Sets the current key's value."""
        e, slot = self._at()
        e.changes[slot] = _encode_state(e, value)

    update = set

    def clear(self):
        """Removes the current key's value."""
        e, slot = self._at()
        e.changes[slot] = None


class ListState(_Keyed):
    """A list per key (Flink's ``ListState``). :meth:`add` does not read the list."""

    __slots__ = ()
    _kind = LIST

    def get(self):
        """The current key's list (empty if it has none)."""
        e, slot = self._at()
        change = e.changes.get(slot)
        if change is not None and change[0]:
            items = change[1]
        else:
            loaded = e.loaded
            if loaded is None:
                loaded = self._ctx._core.load(e)
            items = loaded[slot] if change is None else loaded[slot] + change[1]
        return [_decode_state(e, i) for i in items]

    def add(self, value):
        """Appends ``value`` to the current key's list."""
        e, slot = self._at()
        data = _encode_state(e, value)
        change = e.changes.get(slot)
        if change is None:
            e.changes[slot] = (False, [data])
        else:
            change[1].append(data)

    def add_all(self, values):
        """Appends each of ``values``."""
        for v in values:
            self.add(v)

    def update(self, values):
        """Replaces the current key's list with ``values``."""
        e, slot = self._at()
        e.changes[slot] = (True, [_encode_state(e, v) for v in values])

    def clear(self):
        """Empties the current key's list."""
        e, slot = self._at()
        e.changes[slot] = (True, [])


class MapState(_Keyed):
    """A map per key (Flink's ``MapState``). Reading one entry of a large map costs one host
    call for that entry, not a copy of the map. Entries come in the order of their keys'
    encoded bytes (for integer keys ≥ 0: numeric order)."""

    __slots__ = ()
    _kind = MAP

    def _overlay(self, e, slot):
        change = e.changes.get(slot)
        if change is None:
            change = e.changes[slot] = (False, {})
        return change

    def _stored(self, e, slot, k):
        loaded = e.loaded
        if loaded is None:
            loaded = self._ctx._core.load(e)
        entries = loaded[slot]
        if isinstance(entries, dict):
            return entries.get(k)
        fetched = e.fetched.setdefault(slot, {})
        if k not in fetched:
            core = self._ctx._core
            fetched[k] = core.backend.map_get(e.handle, core.keys, slot, k)
        return fetched[k]

    def _raw(self, e, slot, k):
        change = e.changes.get(slot)
        if change is not None:
            v = change[1].get(k)
            if v is not None:
                return None if v is _REMOVED else v
            if change[0]:
                return None
        return self._stored(e, slot, k)

    def get(self, key, default=None):
        """The value of ``key`` in the current key's map, or ``default``."""
        e, slot = self._at()
        v = self._raw(e, slot, _encode_state(e, key))
        return default if v is None else _decode_state(e, v)

    def contains(self, key):
        """Whether the current key's map has ``key``."""
        e, slot = self._at()
        return self._raw(e, slot, _encode_state(e, key)) is not None

    __contains__ = contains

    def put(self, key, value):
        """Sets ``key`` to ``value`` in the current key's map."""
        e, slot = self._at()
        self._overlay(e, slot)[1][_encode_state(e, key)] = _encode_state(e, value)

    def put_all(self, entries):
        """Puts each ``(key, value)`` of ``entries`` (a dict or pairs)."""
        items = entries.items() if isinstance(entries, dict) else entries
        for k, v in items:
            self.put(k, v)

    def remove(self, key):
        """Removes ``key`` from the current key's map."""
        e, slot = self._at()
        self._overlay(e, slot)[1][_encode_state(e, key)] = _REMOVED

    def clear(self):
        """Empties the current key's map."""
        e, slot = self._at()
        e.changes[slot] = (True, {})

    def _entries(self):
        e, slot = self._at()
        change = e.changes.get(slot)
        merged = {}
        if change is None or not change[0]:
            loaded = e.loaded
            if loaded is None:
                loaded = self._ctx._core.load(e)
            stored = loaded[slot]
            if not isinstance(stored, dict):
                core = self._ctx._core
                buf = core.backend.map_entries(e.handle, core.keys, slot)
                stored, end = _read_map(buf, 0, allow_large=False)
                w.check_end(buf, end, "map-state entries")
                loaded[slot] = stored
            merged.update(stored)
        if change is not None:
            for k, v in change[1].items():
                if v is _REMOVED:
                    merged.pop(k, None)
                else:
                    merged[k] = v
        return e, sorted(merged.items())

    def items(self):
        """The current key's ``(key, value)`` pairs, in key order."""
        e, entries = self._entries()
        return [(_decode_state(e, k), _decode_state(e, v)) for k, v in entries]

    entries = items

    def keys(self):
        """The current key's map keys, in order."""
        e, entries = self._entries()
        return [_decode_state(e, k) for k, _ in entries]

    def values(self):
        """The current key's map values, in key order."""
        e, entries = self._entries()
        return [_decode_state(e, v) for _, v in entries]

    def is_empty(self):
        """Whether the current key's map has no entry."""
        e, slot = self._at()
        change = e.changes.get(slot)
        if change is not None and any(v is not _REMOVED for v in change[1].values()):
            return False
        if change is not None and change[0]:
            return True
        return not self._entries()[1]

    def __len__(self):
        return len(self._entries()[1])


class _OperatorStateBase:
    __slots__ = ("_core", "_handle", "_name")

    def __init__(self, core, name, mode):
        self._core, self._name = core, name
        known = core.operator_states.get(name)
        if known is None:
            handle = core.backend.declare_operator_state(name, mode)
            core.operator_states[name] = (mode, handle)
        elif known[0] != mode:
            raise StateError(
                f"operator state {name!r} was declared with redistribution {known[0].name}, "
                f"now with {mode.name}; a state keeps one mode"
            )
        else:
            handle = known[1]
        self._handle = handle

    def _get(self):
        return [decode(e) for e in self._core.backend.get_operator_state(self._handle)]

    def _set(self, elements):
        try:
            encoded = [encode(e) for e in elements]
        except CodecError as x:
            raise StateError(f"operator state {self._name!r}: {x}") from None
        self._core.backend.set_operator_state(self._handle, encoded)


class OperatorListState(_OperatorStateBase):
    """A list per subtask, not tied to a key (Flink's operator list state); each call crosses
    to the host, so read it in ``open`` and write it once per batch at most."""

    __slots__ = ()

    def get(self):
        return self._get()

    def set(self, elements):
        self._set(list(elements))

    def add(self, element):
        self._set(self._get() + [element])

    def clear(self):
        self._set([])


class OperatorState(_OperatorStateBase):
    """A single value per subtask (a split list of at most one element)."""

    __slots__ = ()

    def get(self, default=None):
        elements = self._get()
        return elements[0] if elements else default

    def set(self, value):
        self._set([value])

    def clear(self):
        self._set([])


class _Logging:
    """``log`` and one method per level, shared by the contexts."""

    __slots__ = ()

    def log(self, level, message):
        self._core.backend.log(Level(level), str(message))

    def trace(self, message):
        self.log(Level.TRACE, message)

    def debug(self, message):
        self.log(Level.DEBUG, message)

    def info(self, message):
        self.log(Level.INFO, message)

    def warn(self, message):
        self.log(Level.WARN, message)

    warning = warn

    def error(self, message):
        self.log(Level.ERROR, message)

    def operator_state(self, name):
        """A single value of this subtask, kept across restores (Flink's operator state)."""
        return OperatorState(self._core, name, Redistribution.SPLIT)

    def operator_list_state(self, name):
        """A list of this subtask that a restore at another parallelism splits evenly."""
        return OperatorListState(self._core, name, Redistribution.SPLIT)

    def union_list_state(self, name):
        """A list that every subtask gets whole after a restore at another parallelism."""
        return OperatorListState(self._core, name, Redistribution.UNION)


class OpenContext(_Logging):
    """What ``open`` gets: who this instance is, its config, keyed state to declare, operator
    state and the log."""

    __slots__ = ("_core", "_ctx", "operator_uid", "subtask_index", "parallelism", "config_json")

    def __init__(self, core, info, ctx):
        self._core = core
        self._ctx = ctx
        self.operator_uid = info["operator_uid"]
        self.subtask_index = info["subtask_index"]
        self.parallelism = info["parallelism"]
        self.config_json = info["config"]

    @property
    def config(self):
        """The operator's ``config`` table of the job spec, as a dict (``{}`` when absent)."""
        try:
            return json.loads(self.config_json or "{}")
        except ValueError as e:
            raise WeirError(f"the operator's config is not JSON: {e}") from None

    def _declare(self, cls, name, ttl):
        handle = self._ctx._handle(cls, name, ttl)
        # Declared now, so that a state declared twice in two ways fails open.
        self._core.entry(name, cls._kind, ttl)
        return handle

    def value_state(self, name, ttl=None):
        """Declares the keyed value state ``name`` once, as Flink's state descriptors are, and
        returns its handle: keep it (``self.count = ctx.value_state("count")``) and use it in
        ``process`` and ``on_timer``, where it acts on the current key. The same state as
        ``Context.value_state(name)``; declaring it here also finds a conflict in ``open``."""
        return self._declare(ValueState, name, ttl)

    def list_state(self, name, ttl=None):
        """Declares the keyed list state ``name`` (see :meth:`value_state`)."""
        return self._declare(ListState, name, ttl)

    def map_state(self, name, ttl=None):
        """Declares the keyed map state ``name`` (see :meth:`value_state`)."""
        return self._declare(MapState, name, ttl)


class Context(_Logging):
    """What ``process``, ``on_timer``, ``finish_batch`` and ``close`` get: keyed state of the
    current key, output, timers and time, the log."""

    __slots__ = ("_core", "_slot", "_key", "_timestamp", "_handles")

    def __init__(self, core):
        self._core = core
        self._slot = None
        self._key = None
        self._timestamp = None
        self._handles = {}

    @property
    def current_key(self):
        """The key of the record or timer being handled (``None`` without one)."""
        return self._key

    def _handle(self, cls, name, ttl):
        if ttl is not None and not isinstance(ttl, Ttl):
            raise TypeError(f"ttl of state {name!r} must be a weir.Ttl")
        h = self._handles.get(name)
        if h is None or type(h) is not cls or h._ttl != ttl:
            h = self._handles[name] = cls(self, name, ttl)
        return h

    def value_state(self, name, ttl=None):
        """The keyed value state ``name`` (``ttl``: a :class:`weir.Ttl`)."""
        return self._handle(ValueState, name, ttl)

    def list_state(self, name, ttl=None):
        """The keyed list state ``name``."""
        return self._handle(ListState, name, ttl)

    def map_state(self, name, ttl=None):
        """The keyed map state ``name``."""
        return self._handle(MapState, name, ttl)

    def emit(self, key, value):
        """Emits an insert to the main output, with the current record's timestamp (an
        event-time timer's time in ``on_timer``). ``key`` and ``value`` are bytes or str (a
        value of another type is written as ``str(value)``); ``key`` may be ``None``."""
        k = None if key is None else _as_bytes(key, "key")
        self._core.emit(None, 0, k, self._timestamp, _value_bytes(value))

    def emit_record(self, kind, key, timestamp, value):
        """Emits a record with an explicit changelog kind and timestamp (``None``: none)."""
        k = None if key is None else _as_bytes(key, "key")
        self._core.emit(None, int(Kind(kind)), k, timestamp, _value_bytes(value))

    def emit_to(self, side_output, key, value):
        """Emits an insert to side output ``side_output`` (the job spec routes it by name)."""
        k = None if key is None else _as_bytes(key, "key")
        name = _as_bytes(side_output, "side_output")
        self._core.emit(name, 0, k, self._timestamp, _value_bytes(value))

    def _timer(self, op, timestamp, domain):
        if self._slot is None:
            raise StateError(
                "timers are keyed, but there is no current key: key the stream "
                "(edge = \"key_by\") before this operator"
            )
        self._core.timer(op, self._slot, int(timestamp), domain)

    def register_event_timer(self, timestamp):
        """``on_timer`` runs for the current key once the watermark reaches ``timestamp``
        (the same time twice fires once). Cost: a dict insert here, one host call per batch."""
        self._timer(w.REGISTER_EVENT, timestamp, 0)

    def delete_event_timer(self, timestamp):
        """Deletes the current key's event-time timer at ``timestamp``, if any."""
        self._timer(w.DELETE_EVENT, timestamp, 0)

    def register_processing_time_timer(self, timestamp):
        """``on_timer`` runs for the current key once the host's clock reaches ``timestamp``."""
        self._timer(w.REGISTER_PROCESSING, timestamp, 1)

    def delete_processing_time_timer(self, timestamp):
        """Deletes the current key's processing-time timer at ``timestamp``, if any."""
        self._timer(w.DELETE_PROCESSING, timestamp, 1)

    def current_watermark(self):
        """The task's event-time watermark (ms), ``None`` before the first."""
        return self._core.backend.current_watermark()

    def current_processing_time(self):
        """The host's clock, in milliseconds since the Unix epoch."""
        return self._core.backend.current_processing_time()


class Instance:
    """An operator with its runtime state."""

    def __init__(self, operator, backend, info):
        self.operator = operator
        self.core = Core(backend)
        self.info = info
        self.ctx = Context(self.core)

    def open(self):
        try:
            self.operator.open(OpenContext(self.core, self.info, self.ctx))
        except Exception as e:
            raise WeirError(failure(e, "open")) from e

    def process(self, batch):
        core, ctx = self.core, self.ctx
        keys, pos = w.read_key_table(batch)
        core.begin(keys)
        (n,) = w.U32.unpack_from(batch, pos)
        pos += 4
        process = self.operator.process
        describe = getattr(self.operator, "_describe_input", None) or _describe_record
        u32, i64 = w.U32.unpack_from, w.I64.unpack_from
        for index in range(n):
            hdr = batch[pos]
            pos += 1
            if hdr & 4:
                (slot,) = u32(batch, pos)
                pos += 4
                key = keys[slot]
            else:
                slot = key = None
            if hdr & 8:
                (ts,) = i64(batch, pos)
                pos += 8
            else:
                ts = None
            (length,) = u32(batch, pos)
            pos += 4
            value = batch[pos : pos + length]
            pos += length
            ctx._slot, ctx._key, ctx._timestamp = slot, key, ts
            try:
                process(ctx, Record(key, value, ts, _KINDS[hdr & 3], 1 if hdr & 32 else 0))
            except Exception as e:
                raise WeirError(failure(e, describe(index, key, value))) from e
        w.check_end(batch, pos, "batch")
        ctx._slot = ctx._key = ctx._timestamp = None
        try:
            self.operator.finish_batch(ctx)
        except Exception as e:
            raise WeirError(failure(e, "finish_batch")) from e
        core.finish()

    def on_timers(self, buf):
        core, ctx = self.core, self.ctx
        keys, pos = w.read_key_table(buf)
        fired = w.read_fired(buf, pos)
        core.begin(keys)
        on_timer = self.operator.on_timer
        ops = core.timer_ops
        for domain, slot, ts in fired:
            # A timer that a callback of this firing deleted does not fire (as in Flink).
            if ops and ops.get((slot, domain, ts), 0) in (w.DELETE_EVENT, w.DELETE_PROCESSING):
                continue
            key = keys[slot]
            ctx._slot, ctx._key = slot, key
            # As in Flink: output of an event-time timer carries the timer's time.
            ctx._timestamp = ts if domain == 0 else None
            try:
                on_timer(ctx, Timer(TimeDomain(domain), key, ts))
            except Exception as e:
                kind = "event-time" if domain == 0 else "processing-time"
                raise WeirError(
                    failure(e, f"{kind} timer at {ts} ({describe_key(key)})")
                ) from e
        ctx._slot = ctx._key = ctx._timestamp = None
        core.finish()

    def close(self):
        core, ctx = self.core, self.ctx
        core.begin([])
        ctx._slot = ctx._key = ctx._timestamp = None
        try:
            self.operator.close(ctx)
        except Exception as e:
            raise WeirError(failure(e, "close")) from e
        core.finish()
