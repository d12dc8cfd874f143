// Types of weir-sdk: stream operators in JavaScript (or TypeScript) for weir.

/** A value state can hold: what CBOR, the SDKs' shared state codec, encodes. */
export type StateValue =
  | null
  | boolean
  | number
  | bigint
  | string
  | Uint8Array
  | StateValue[]
  | { [key: string]: StateValue }
  | Map<StateValue, StateValue>;

export class WeirError extends Error {}
export class StateError extends WeirError {}
export class CodecError extends Error {}

export const Kind: { readonly INSERT: 0; readonly UPDATE_BEFORE: 1; readonly UPDATE_AFTER: 2; readonly DELETE: 3 };
export type Kind = 0 | 1 | 2 | 3;
export const TimeDomain: { readonly EVENT_TIME: 0; readonly PROCESSING_TIME: 1 };
export type TimeDomain = 0 | 1;
export const Level: { readonly TRACE: 0; readonly DEBUG: 1; readonly INFO: 2; readonly WARN: 3; readonly ERROR: 4 };
export type Level = 0 | 1 | 2 | 3 | 4;
export const Redistribution: { readonly SPLIT: 0; readonly UNION: 1 };
export const UpdateType: { readonly ON_CREATE_AND_WRITE: 0; readonly ON_READ_AND_WRITE: 1; readonly DISABLED: 2 };
export const StateVisibility: { readonly NEVER_RETURN_EXPIRED: 0; readonly RETURN_EXPIRED_IF_NOT_CLEANED_UP: 1 };
export const TtlTime: { readonly PROCESSING_TIME: 0; readonly EVENT_TIME: 1 };

/** Time-to-live of a keyed state's entries, enforced by the host (Flink's StateTtlConfig). */
export class Ttl {
  constructor(ms: number, options?: { update?: 0 | 1 | 2; visibility?: 0 | 1; time?: 0 | 1 });
  readonly ms: number;
  readonly update: 0 | 1 | 2;
  readonly visibility: 0 | 1;
  readonly time: 0 | 1;
  equals(other: unknown): boolean;
}

export class Record {
  readonly key: Uint8Array | null;
  readonly value: Uint8Array;
  /** Event time in ms, or null. */
  readonly timestamp: number | null;
  readonly kind: Kind;
  /** 0 for the operator's `input`, 1 for its `second_input`. */
  readonly input: 0 | 1;
  keyStr(): string | null;
  valueStr(): string;
}

export class Timer {
  readonly domain: TimeDomain;
  readonly key: Uint8Array;
  readonly timestamp: number;
  keyStr(): string;
}

export class ValueState<T extends StateValue = StateValue> {
  get(fallback?: T | null): T | null;
  set(value: T): void;
  clear(): void;
}

export class ListState<T extends StateValue = StateValue> {
  get(): T[];
  /** Appends without reading the list. */
  add(value: T): void;
  addAll(values: Iterable<T>): void;
  update(values: Iterable<T>): void;
  clear(): void;
}

export class MapState<K extends StateValue = StateValue, V extends StateValue = StateValue> {
  get(key: K, fallback?: V | null): V | null;
  has(key: K): boolean;
  put(key: K, value: V): void;
  putAll(entries: Map<K, V> | { [key: string]: V }): void;
  remove(key: K): void;
  clear(): void;
  /** [key, value] pairs in the order of their keys' encoding. */
  entries(): [K, V][];
  keys(): K[];
  values(): V[];
  size(): number;
  isEmpty(): boolean;
}

export class OperatorListState<T extends StateValue = StateValue> {
  get(): T[];
  set(elements: Iterable<T>): void;
  add(element: T): void;
  clear(): void;
}

export class OperatorState<T extends StateValue = StateValue> {
  get(fallback?: T | null): T | null;
  set(value: T): void;
  clear(): void;
}

/** The log and operator state, on both contexts. */
declare class Logging {
  log(level: Level, message: unknown): void;
  trace(message: unknown): void;
  debug(message: unknown): void;
  info(message: unknown): void;
  warn(message: unknown): void;
  error(message: unknown): void;
  operatorState<T extends StateValue = StateValue>(name: string): OperatorState<T>;
  operatorListState<T extends StateValue = StateValue>(name: string): OperatorListState<T>;
  unionListState<T extends StateValue = StateValue>(name: string): OperatorListState<T>;
}

export class OpenContext extends Logging {
  readonly operatorUid: string;
  readonly subtaskIndex: number;
  readonly parallelism: number;
  readonly configJson: string;
  /** The operator's config table of the job spec ({} when absent). */
  readonly config: { [key: string]: unknown };
  /** Declares keyed state once; the handle acts on the current key in process and onTimer. */
  valueState<T extends StateValue = StateValue>(name: string, ttl?: Ttl | null): ValueState<T>;
  listState<T extends StateValue = StateValue>(name: string, ttl?: Ttl | null): ListState<T>;
  mapState<K extends StateValue = StateValue, V extends StateValue = StateValue>(name: string, ttl?: Ttl | null): MapState<K, V>;
}

type Bytes = Uint8Array | string;

export class Context extends Logging {
  /** The key of the record or timer being handled. */
  readonly currentKey: Uint8Array | null;
  valueState<T extends StateValue = StateValue>(name: string, ttl?: Ttl | null): ValueState<T>;
  listState<T extends StateValue = StateValue>(name: string, ttl?: Ttl | null): ListState<T>;
  mapState<K extends StateValue = StateValue, V extends StateValue = StateValue>(name: string, ttl?: Ttl | null): MapState<K, V>;
  /** An insert with the current record's timestamp; a value not bytes or text is String(value). */
  emit(key: Bytes | null, value: unknown): void;
  emitRecord(kind: Kind, key: Bytes | null, timestamp: number | null, value: unknown): void;
  emitTo(sideOutput: string, key: Bytes | null, value: unknown): void;
  registerEventTimer(timestamp: number): void;
  deleteEventTimer(timestamp: number): void;
  registerProcessingTimeTimer(timestamp: number): void;
  deleteProcessingTimeTimer(timestamp: number): void;
  currentWatermark(): number | null;
  currentProcessingTime(): number;
}

/** Extend it and export the class as the module's default; override process(). */
export class Operator {
  open(ctx: OpenContext): void;
  process(ctx: Context, record: Record): void;
  finishBatch(ctx: Context): void;
  onTimer(ctx: Context, timer: Timer): void;
  close(ctx: Context): void;
}

/** A window `[start, end)` in milliseconds since the Unix epoch. */
export interface Window {
  readonly start: number;
  readonly end: number;
}

/** Folds a window's records into an accumulator the host keeps (Flink's AggregateFunction). */
export class AggregateFunction<A extends StateValue = StateValue> {
  open(ctx: OpenContext): void;
  create(): A;
  add(acc: A, value: Uint8Array): A;
  /** Session windows only: two sessions' accumulators made one. */
  merge(acc: A, other: A): A;
  /** Written as a built-in aggregate's result: `<start>,<end>,<result>`. */
  result(acc: A): Uint8Array | string | number | bigint | boolean;
}

/** Gets all of a window's values when it fires (Flink's ProcessWindowFunction). */
export class ProcessWindowFunction {
  open(ctx: OpenContext): void;
  process(ctx: Context, key: Uint8Array, window: Window, values: Uint8Array[]): void;
}

/** The operator (the module's default export) running an aggregate for a window of the host. */
export function aggregate(fn: new () => AggregateFunction<any>): new () => Operator;
/** The operator (the module's default export) running a process-window function. */
export function processWindow(fn: new () => ProcessWindowFunction): new () => Operator;

export function encode(value: StateValue): Uint8Array;
export function decode(data: Uint8Array): StateValue;
