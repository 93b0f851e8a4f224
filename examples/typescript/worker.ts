/** A worker process for the order workflow: node worker.js WORKER_ID (until SIGTERM). */
import { Worker } from "../../clients/typescript/dist/src/index.js";
import { ACTIVITY_QUEUE, chargeCard, orderWorkflow, packParcel, reserveStock, ship } from "./order.js";

const worker = new Worker({
  workflowQueues: [process.env.DEX_DEMO_WORKFLOW_QUEUE ?? "orders"], activityQueues: [ACTIVITY_QUEUE],
  workflows: [orderWorkflow], activities: [reserveStock, chargeCard, packParcel, ship],
  activityLease: 2, workflowLease: 5, workerId: process.argv[2],
});
console.log(`worker ${worker.workerId} polling`);
await worker.run();
console.log(`worker ${worker.workerId} stopped`);
