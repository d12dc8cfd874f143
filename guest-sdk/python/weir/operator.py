"""The class an operator author subclasses."""


class Operator:
    """A stream operator: override :meth:`process`; the other hooks do nothing by default.

    The host makes one instance per parallel subtask (``cls()``), calls :meth:`open` once,
    then :meth:`process` for each record of each batch (then :meth:`finish_batch`),
    :meth:`on_timer` for each timer that fires, and :meth:`close` when the input has ended.
    Keep what must survive a failure in keyed state: an instance (and its attributes) is
    dropped on failure, and on rescaling keys move to other instances. An exception raised
    from a hook fails the task with its message, the record and where it was raised.

    >>> import weir
    >>> class Upper(weir.Operator):
    ...     def process(self, ctx, record):
    ...         ctx.emit(record.key, record.value.upper())
    >>> weir.testing.Harness(Upper).process(["hi"])[0].value
    b'HI'
    """

    def open(self, ctx):
        """Called once per instance before anything else (``ctx``: a ``weir.OpenContext``
        with ``config``, ``subtask_index``, ``parallelism``, operator state and the log)."""

    def process(self, ctx, record):
        """Handles one record; keyed state reached through ``ctx`` is of the record's key."""
        raise NotImplementedError(f"{type(self).__name__} must define process(self, ctx, record)")

    def finish_batch(self, ctx):
        """Called after the last record of each batch, with no current key: emit or log what
        was gathered over the batch."""

    def on_timer(self, ctx, timer):
        """Called for each timer that fires, with the timer's key as the current key."""

    def close(self, ctx):
        """Called once when the input has ended; may emit, has no current key."""
