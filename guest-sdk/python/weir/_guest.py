"""The component side: the backend over the WIT imports of ``wit/stream.wit`` and the export
class that ``weir.export`` makes. Imported only inside a component built by componentize-py,
where the ``wit_world`` bindings exist."""

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import log, output, state, timers, types

from ._runtime import LIST, MAP, VALUE, Instance
from .types import WeirError

_LEVELS = {
    0: types.LogLevel.TRACE,
    1: types.LogLevel.DEBUG,
    2: types.LogLevel.INFO,
    3: types.LogLevel.WARN,
    4: types.LogLevel.ERROR,
}


def _wit_ttl(ttl):
    if ttl is None:
        return None
    return types.Ttl(
        ttl.ttl_ms,
        types.TtlUpdate(int(ttl.update)),
        types.TtlVisibility(int(ttl.visibility)),
        types.TtlTime(int(ttl.time)),
    )


class WitBackend:
    """The host, reached through the WIT imports."""

    def __init__(self):
        self.states = []
        self.operator_states = []

    def declare_state(self, kind, name, ttl):
        cls = {VALUE: state.ValueState, LIST: state.ListState, MAP: state.MapState}[kind]
        self.states.append(cls(name, _wit_ttl(ttl)))
        return len(self.states) - 1

    def load(self, handle, keys):
        return self.states[handle].load()

    def map_get(self, handle, keys, slot, map_key):
        return self.states[handle].get(slot, map_key)

    def map_entries(self, handle, keys, slot):
        return self.states[handle].entries(slot)

    def store(self, handle, keys, changes):
        self.states[handle].store(changes)

    def emit(self, records):
        output.emit(records)

    def update_timers(self, keys, changes):
        timers.update(changes)

    def current_watermark(self):
        return timers.current_watermark()

    def current_processing_time(self):
        return timers.current_processing_time()

    def log(self, level, message):
        log.log(_LEVELS[int(level)], message)

    def declare_operator_state(self, name, mode):
        self.operator_states.append(state.OperatorState(name, types.Redistribution(int(mode))))
        return len(self.operator_states) - 1

    def get_operator_state(self, handle):
        return self.operator_states[handle].get()

    def set_operator_state(self, handle, elements):
        self.operator_states[handle].set(elements)


def _call(f, *args):
    try:
        f(*args)
    except WeirError as e:
        raise Err(str(e)) from None
    except Exception as e:
        raise Err(f"{type(e).__name__}: {e}") from None


def export(operator_class):
    """The class componentize-py exports as the world's ``operator`` interface."""

    class Exported(exports.Operator):
        instance = None

        def open(self, ctx):
            info = {
                "operator_uid": ctx.operator_uid,
                "subtask_index": ctx.subtask_index,
                "parallelism": ctx.parallelism,
                "config": ctx.config,
            }
            try:
                operator = operator_class()
            except Exception as e:
                raise Err(f"{operator_class.__name__}() failed: {type(e).__name__}: {e}") from None
            instance = Instance(operator, WitBackend(), info)
            _call(instance.open)
            Exported.instance = instance

        def process(self, batch):
            _call(self._instance().process, batch)

        def on_timers(self, buf):
            _call(self._instance().on_timers, buf)

        def close(self):
            try:
                _call(self._instance().close)
            finally:
                Exported.instance = None

        @staticmethod
        def _instance():
            if Exported.instance is None:
                raise Err("weir: the host called the operator before open")
            return Exported.instance

    Exported.__name__ = Exported.__qualname__ = "Operator"
    return Exported
