// The values an operator handles: records, timers, kinds, time-to-live, errors.

/** An error of the SDK; thrown from a hook, it fails the task with its message. */
export class WeirError extends Error {
  constructor(message) {
    super(message);
    this.name = "WeirError";
  }
}

/** State used the wrong way: without a current key, a name of two kinds, a value the codec
 * cannot store or read. */
export class StateError extends WeirError {
  constructor(message) {
    super(message);
    this.name = "StateError";
  }
}

export const Kind = Object.freeze({ INSERT: 0, UPDATE_BEFORE: 1, UPDATE_AFTER: 2, DELETE: 3 });
export const TimeDomain = Object.freeze({ EVENT_TIME: 0, PROCESSING_TIME: 1 });
export const Level = Object.freeze({ TRACE: 0, DEBUG: 1, INFO: 2, WARN: 3, ERROR: 4 });
export const Redistribution = Object.freeze({ SPLIT: 0, UNION: 1 });
export const UpdateType = Object.freeze({ ON_CREATE_AND_WRITE: 0, ON_READ_AND_WRITE: 1, DISABLED: 2 });
export const StateVisibility = Object.freeze({ NEVER_RETURN_EXPIRED: 0, RETURN_EXPIRED_IF_NOT_CLEANED_UP: 1 });
export const TtlTime = Object.freeze({ PROCESSING_TIME: 0, EVENT_TIME: 1 });

/** Time-to-live of a keyed state's entries, enforced by the host (Flink's StateTtlConfig). */
export class Ttl {
  constructor(ms, { update = UpdateType.ON_CREATE_AND_WRITE, visibility = StateVisibility.NEVER_RETURN_EXPIRED, time = TtlTime.PROCESSING_TIME } = {}) {
    if (!Number.isSafeInteger(ms) || ms < 1) throw new RangeError(`a time-to-live must be at least 1 ms, not ${ms}`);
    this.ms = ms;
    this.update = update;
    this.visibility = visibility;
    this.time = time;
    Object.freeze(this);
  }
  equals(other) {
    return other instanceof Ttl && other.ms === this.ms && other.update === this.update &&
      other.visibility === this.visibility && other.time === this.time;
  }
}

const text = new TextDecoder("utf-8", { fatal: true });

/** A record of a batch. */
export class Record {
  constructor(key, value, timestamp = null, kind = Kind.INSERT, input = 0) {
    this.key = key;
    this.value = value;
    this.timestamp = timestamp;
    this.kind = kind;
    this.input = input;
  }
  /** The key as text (null without key); throws if it is not UTF-8. */
  keyStr() {
    return this.key === null ? null : text.decode(this.key);
  }
  /** The value as text; throws if it is not UTF-8. */
  valueStr() {
    return text.decode(this.value);
  }
}

/** A timer that fired. */
export class Timer {
  constructor(domain, key, timestamp) {
    this.domain = domain;
    this.key = key;
    this.timestamp = timestamp;
  }
  keyStr() {
    return text.decode(this.key);
  }
}

/** The class an operator author extends: override process(); the other hooks do nothing. */
export class Operator {
  open(ctx) {}
  process(ctx, record) {
    throw new WeirError(`${this.constructor.name} must define process(ctx, record)`);
  }
  finishBatch(ctx) {}
  onTimer(ctx, timer) {}
  close(ctx) {}
}
