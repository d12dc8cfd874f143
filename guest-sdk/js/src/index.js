// weir's guest SDK for JavaScript: stream operators that run as WebAssembly components.
//
//   import * as weir from "weir-sdk";
//   export default class CountWords extends weir.Operator {
//     process(ctx, record) {
//       const count = ctx.valueState("count");
//       const n = count.get(0) + 1;
//       count.set(n);
//       ctx.emit(record.key, n);
//     }
//   }
//
// The module's default export is the operator; `weir build` makes the component. A window's
// function (window.js) is exported as `weir.aggregate(MyAggregate)` or
// `weir.processWindow(MyFunction)`.
// What crosses to the host crosses once per batch (wit/stream.wit); state values are CBOR
// (cbor.js), the encoding every weir SDK shares.

export { CodecError, decode, encode } from "./cbor.js";
export {
  Context,
  ListState,
  MapState,
  OpenContext,
  OperatorListState,
  OperatorState,
  ValueState,
} from "./runtime.js";
export {
  Kind,
  Level,
  Operator,
  Record,
  Redistribution,
  StateError,
  StateVisibility,
  TimeDomain,
  Timer,
  Ttl,
  TtlTime,
  UpdateType,
  WeirError,
} from "./types.js";
export { AggregateFunction, ProcessWindowFunction, aggregate, processWindow } from "./window.js";
