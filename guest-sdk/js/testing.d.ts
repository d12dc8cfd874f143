import type { Kind, Level, Operator, StateValue, Window } from "./index.js";

export class Input {
  constructor(value: Uint8Array | string, options?: { key?: Uint8Array | string | null; timestamp?: number | null; kind?: Kind });
}

export class Output {
  readonly sideOutput: string | null;
  readonly kind: Kind;
  readonly key: Uint8Array | null;
  readonly timestamp: number | null;
  readonly value: Uint8Array;
  readonly keyStr: string | null;
  readonly valueStr: string;
}

type Feed = Input | Uint8Array | string | [Uint8Array | string, Uint8Array | string];

/** Runs an operator natively against an in-memory host (node --test, no WebAssembly). */
export class Harness {
  constructor(
    operator: new () => Operator,
    options?: { config?: object | string | null; parallelism?: number; subtaskIndex?: number; operatorUid?: string },
  );
  process(records: Iterable<Feed>): Output[];
  processSecond(records: Iterable<Feed>): Output[];
  fireEventTimersUpTo(timestamp: number): Output[];
  setProcessingTime(ms: number): Output[];
  close(): Output[];
  restart(): void;
  valueState(name: string, key: Uint8Array | string): StateValue | null;
  listState(name: string, key: Uint8Array | string): StateValue[];
  mapState(name: string, key: Uint8Array | string): [StateValue, StateValue][];
  operatorState(name: string): StateValue | null;
  eventTimers(key: Uint8Array | string): number[];
  processingTimeTimers(key: Uint8Array | string): number[];
  readonly logs: [Level, string][];
}

/** Window calls as a window of the host makes them, to drive a window function's operator. */
export function updateCall(window: Window, accs: Uint8Array[], values: (Uint8Array | string)[]): Uint8Array;
export function resultCall(window: Window, acc: Uint8Array): Uint8Array;
export function processCall(window: Window, values: (Uint8Array | string)[]): Uint8Array;
