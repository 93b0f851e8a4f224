/**
 * dex's TypeScript SDK: deterministic workflows replayed from their history, activities with
 * retry policies, a Worker and a Client, on node-postgres.
 */
export { workflow, activity } from "./definitions.js";
export type {
  ActivityDefinition, ActivityFunction, ActivityOptions, WorkflowDefinition, WorkflowFunction, WorkflowOptions,
} from "./definitions.js";
export {
  WorkflowContext, DexFuture, ActivityHandle, Timer, EventWait, ChildRun, Signal, ContinueAsNew, Replayer, replay,
} from "./runtime.js";
export type { ActivityCallOptions, ChildOptions, ParentClosePolicy, SignalOutcome, SignalTarget, WorkflowLogger } from "./runtime.js";
export { Worker, ActivityContext } from "./worker.js";
export type { ActivityInfo, WorkerOptions, WorkerStats } from "./worker.js";
export { Client, TERMINAL, formatHistory } from "./client.js";
export type {
  EventOutcome, ListOptions, OverlapPolicy, Run, Schedule, ScheduleChange, ScheduleOptions, StartManyOptions, StartOptions,
} from "./client.js";
export { checkJson } from "./convert.js";
export type { Duration, Json, Message, RetryPolicy } from "./convert.js";
export * from "./errors.js";
