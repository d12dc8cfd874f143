// The component side: the backend over the WIT imports of wit/stream.wit, and the export
// object of the world's `operator` interface. `weir build` bundles it with the operator
// module; only componentize-js resolves its `weir:stream/...` imports.

import { log } from "weir:stream/log@0.2.0";
import { emit } from "weir:stream/output@0.2.0";
import { ListState, MapState, OperatorState, ValueState } from "weir:stream/state@0.2.0";
import { currentProcessingTime, currentWatermark, update } from "weir:stream/timers@0.2.0";

import { Instance, LIST, MAP, VALUE } from "./runtime.js";
import { WeirError } from "./types.js";

const LEVELS = ["trace", "debug", "info", "warn", "error"];

// Buffers from the host are typed arrays of the engine's own making; the SDK works on
// Uint8Arrays of this realm (its `instanceof` checks and subarrays).
function bytes(b) {
  return b instanceof Uint8Array ? b : new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
}
const UPDATES = ["on-create-and-write", "on-read-and-write", "disabled"];
const VISIBILITIES = ["never-return-expired", "return-expired-if-not-cleaned-up"];
const TIMES = ["processing-time", "event-time"];

function witTtl(ttl) {
  if (ttl === null) return undefined;
  return {
    ttlMs: BigInt(ttl.ms),
    update: UPDATES[ttl.update],
    visibility: VISIBILITIES[ttl.visibility],
    time: TIMES[ttl.time],
  };
}

class WitBackend {
  constructor() {
    this.states = [];
    this.operatorStates = [];
  }
  declareState(kind, name, ttl) {
    const cls = kind === VALUE ? ValueState : kind === LIST ? ListState : MapState;
    this.states.push(new cls(name, witTtl(ttl)));
    return this.states.length - 1;
  }
  load(handle) {
    return bytes(this.states[handle].load());
  }
  mapGet(handle, keys, slot, mapKey) {
    const value = this.states[handle].get(slot, mapKey);
    return value === undefined || value === null ? null : bytes(value);
  }
  mapEntries(handle, keys, slot) {
    return bytes(this.states[handle].entries(slot));
  }
  store(handle, keys, changes) {
    this.states[handle].store(changes);
  }
  emit(records) {
    emit(records);
  }
  updateTimers(keys, changes) {
    update(changes);
  }
  currentWatermark() {
    const w = currentWatermark();
    return w === undefined || w === null ? null : Number(w);
  }
  currentProcessingTime() {
    return Number(currentProcessingTime());
  }
  log(level, message) {
    log(LEVELS[level], message);
  }
  declareOperatorState(name, mode) {
    this.operatorStates.push(new OperatorState(name, mode === 0 ? "split" : "union"));
    return this.operatorStates.length - 1;
  }
  getOperatorState(handle) {
    return this.operatorStates[handle].get().map(bytes);
  }
  setOperatorState(handle, elements) {
    this.operatorStates[handle].set(elements);
  }
}

// A failure goes back as the hook's `err` (componentize-js turns a thrown string into it).
function call(f) {
  try {
    f();
  } catch (e) {
    if (e instanceof WeirError) throw e.message;
    throw e instanceof Error ? `${e.name}: ${e.message}` : String(e);
  }
}

/** The export of the `operator` interface for `OperatorClass`. */
export function exportOperator(OperatorClass) {
  let instance = null;
  const current = () => {
    if (instance === null) throw "weir: the host called the operator before open";
    return instance;
  };
  return {
    open(ctx) {
      const info = {
        operatorUid: ctx.operatorUid,
        subtaskIndex: ctx.subtaskIndex,
        parallelism: ctx.parallelism,
        config: ctx.config,
      };
      call(() => {
        const made = new Instance(new OperatorClass(), new WitBackend(), info);
        made.open();
        instance = made;
      });
    },
    process(batch) {
      const i = current();
      call(() => i.process(bytes(batch)));
    },
    onTimers(timers) {
      const i = current();
      call(() => i.onTimers(bytes(timers)));
    },
    close() {
      const i = current();
      instance = null;
      call(() => i.close());
    },
  };
}
