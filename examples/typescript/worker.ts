/** A worker process for the order workflow: node worker.js WORKER_ID (until SIGTERM). */
import { Worker } from "../../clients/typescript/dist/src/index.js";
import { ACTIVITY_QUEUE, chargeCard, orderWorkflow, packParcel, reserveStock, ship } from "./order.js";

const worker = new Worker({
  workflowQueues: [process.env.DEX_DEMO_WORKFLOW_QUEUE ?? "orders"], activityQueues: [ACTIVITY_QUEUE],
  workflows: [orderWorkflow], activities: [reserveStock, chargeCard, packParcel, ship],
  activityLease: 2, workflowLease: 5, workerId: process.argv[2],
  shutdownTimeout: Number(process.env.DEX_DEMO_SHUTDOWN_TIMEOUT ?? 10),
});
console.log(`worker ${worker.workerId} polling`);
try {
  await worker.run();           // until SIGTERM or SIGINT, then a graceful shutdown
} catch (e) {
  console.error(`worker ${worker.workerId}: ${(e as Error).message}`);
  process.exitCode = 1;
}
console.log(`worker ${worker.workerId} stopped`);
// An activity still running when the shutdown timeout passed was failed as retryable
// (dex.WorkerShutdown) and will be retried; its code goes on until it returns, and would keep
// the process alive for a result nobody takes: end the process without waiting for it.
process.exit();
