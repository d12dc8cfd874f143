"""The values an operator handles: records, timers, kinds, time-to-live, errors."""

import datetime
import enum


class WeirError(Exception):
    """An error the SDK raises; raised from a hook it fails the task with its message (the
    host restarts the job from its last checkpoint; state lives in the host and survives)."""


class StateError(WeirError):
    """State used the wrong way: keyed state without a current key, a name declared as two
    kinds, a value the state codec cannot store or read."""


class Kind(enum.IntEnum):
    """Changelog kind of a record, as Flink's ``RowKind``."""

    INSERT = 0
    UPDATE_BEFORE = 1
    UPDATE_AFTER = 2
    DELETE = 3


class TimeDomain(enum.IntEnum):
    """The clock a timer fires on."""

    EVENT_TIME = 0
    PROCESSING_TIME = 1


class Level(enum.IntEnum):
    """A log level."""

    TRACE = 0
    DEBUG = 1
    INFO = 2
    WARN = 3
    ERROR = 4


class Redistribution(enum.IntEnum):
    """How a restore at another parallelism spreads an operator list state."""

    SPLIT = 0
    UNION = 1


class UpdateType(enum.IntEnum):
    """When an entry's time-to-live restarts (Flink's ``StateTtlConfig.UpdateType``)."""

    ON_CREATE_AND_WRITE = 0
    ON_READ_AND_WRITE = 1
    DISABLED = 2


class StateVisibility(enum.IntEnum):
    """Whether an expired entry not cleaned up yet may still be read."""

    NEVER_RETURN_EXPIRED = 0
    RETURN_EXPIRED_IF_NOT_CLEANED_UP = 1


class TtlTime(enum.IntEnum):
    """The clock a time-to-live runs on."""

    PROCESSING_TIME = 0
    EVENT_TIME = 1


class Ttl:
    """Time-to-live of a keyed state's entries, enforced by the host's state backends
    (Flink's ``StateTtlConfig``): ``Ttl(datetime.timedelta(hours=1))`` or ``Ttl(ms=...)``.

    >>> Ttl(datetime.timedelta(seconds=2), update=UpdateType.ON_READ_AND_WRITE).ttl_ms
    2000
    """

    __slots__ = ("ttl_ms", "update", "visibility", "time")

    def __init__(
        self,
        ttl=None,
        *,
        ms=None,
        update=UpdateType.ON_CREATE_AND_WRITE,
        visibility=StateVisibility.NEVER_RETURN_EXPIRED,
        time=TtlTime.PROCESSING_TIME,
    ):
        if (ttl is None) == (ms is None):
            raise TypeError("give the time-to-live as a timedelta or as ms=..., one of them")
        if ttl is not None:
            if not isinstance(ttl, datetime.timedelta):
                raise TypeError("ttl must be a datetime.timedelta (or give ms=...)")
            ms = ttl // datetime.timedelta(milliseconds=1)
        if not isinstance(ms, int) or ms <= 0:
            raise ValueError(f"a time-to-live must be at least 1 ms, not {ms!r}")
        self.ttl_ms = ms
        self.update = UpdateType(update)
        self.visibility = StateVisibility(visibility)
        self.time = TtlTime(time)

    def _fields(self):
        return (self.ttl_ms, self.update, self.visibility, self.time)

    def __eq__(self, other):
        return isinstance(other, Ttl) and self._fields() == other._fields()

    def __hash__(self):
        return hash(self._fields())

    def __repr__(self):
        return (
            f"Ttl(ms={self.ttl_ms}, update={self.update.name}, "
            f"visibility={self.visibility.name}, time={self.time.name})"
        )


class Record:
    """A record of a batch: ``key`` (bytes or ``None``), ``value`` (bytes), ``timestamp``
    (event time in ms or ``None``), ``kind`` and ``input`` (0, or 1 for the operator's
    ``second_input``)."""

    __slots__ = ("key", "value", "timestamp", "kind", "input")

    def __init__(self, key, value, timestamp=None, kind=Kind.INSERT, input=0):
        self.key, self.value, self.timestamp = key, value, timestamp
        self.kind, self.input = kind, input

    def key_str(self):
        """The key as text (``None`` without key); ``UnicodeDecodeError`` if not UTF-8."""
        return None if self.key is None else self.key.decode()

    def value_str(self):
        """The value as text; ``UnicodeDecodeError`` if not UTF-8."""
        return self.value.decode()

    def __repr__(self):
        return (
            f"Record(key={self.key!r}, value={self.value!r}, timestamp={self.timestamp}, "
            f"kind={self.kind.name}, input={self.input})"
        )


class Timer:
    """A timer that fired: its ``domain``, ``key`` (bytes) and ``timestamp`` (ms)."""

    __slots__ = ("domain", "key", "timestamp")

    def __init__(self, domain, key, timestamp):
        self.domain, self.key, self.timestamp = domain, key, timestamp

    def key_str(self):
        return self.key.decode()

    def __repr__(self):
        return f"Timer({self.domain.name}, key={self.key!r}, timestamp={self.timestamp})"
