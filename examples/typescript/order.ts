/**
 * The demo's order workflow in TypeScript (the same as examples/order.py): three activities in
 * parallel (reserve the stock, charge the card, pack the parcel), a manager's approval (an
 * external event) with a timeout, a durable timer until the courier's pick-up slot, shipping.
 * Activities append a line to the file named by DEX_DEMO_LOG (when set), so that the demo can
 * count how many times each one really ran, across worker processes.
 */
import { appendFileSync } from "node:fs";
import { ApplicationError, WaitTimeout, activity, workflow, type ActivityContext } from "../../clients/typescript/dist/src/index.js";

export const ACTIVITY_QUEUE = process.env.DEX_DEMO_ACTIVITY_QUEUE ?? "order-activities";

export interface Order {
  id: number;
  items: string[];
  amount: number;
  packingSeconds?: number;
  courierDelay?: number;
}

function note(what: string): void {
  console.log(what);
  if (process.env.DEX_DEMO_LOG) appendFileSync(process.env.DEX_DEMO_LOG, what + "\n");
}

async function work(name: string, order: Order, seconds: number, actx: ActivityContext): Promise<void> {
  note(`activity ${name} for order ${order.id}: attempt ${actx.info.attempt} started`);
  await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
  note(`activity ${name} for order ${order.id}: attempt ${actx.info.attempt} done`);
}

export const reserveStock = activity("reserve_stock", async (order: Order, actx) => {
  await work("reserve_stock", order, 0.2, actx);
  return { reserved: order.items };
});

export const chargeCard = activity("charge_card", async (order: Order, actx) => {
  await work("charge_card", order, 0.4, actx);
  return { receipt: `R-${order.id}`, amount: order.amount };
});

export const packParcel = activity("pack_parcel", async (order: Order, actx) => {
  await work("pack_parcel", order, order.packingSeconds ?? 3, actx);
  return { parcel: `P-${order.id}` };
}, { retry: { initialDelay: 0.5, randomizationFactor: 0 } });

export const ship = activity("ship", async (order: Order, actx) => {
  await work("ship", order, 0.1, actx);
  return { tracking: `TRK-${order.id}` };
});

export const orderWorkflow = workflow("order", async (ctx, order: Order) => {
  ctx.log.info(`order ${order.id} received: ${order.items.join(", ")}`);
  // three activities at once; each is retried by its policy
  const [, payment, parcel] = await ctx.all([
    ctx.activity(reserveStock, order),
    ctx.activity(chargeCard, order),
    ctx.activity(packParcel, order, { startToCloseTimeout: 60 }),
  ]);
  ctx.setCustomStatus("awaiting approval");
  let approval: { by: string };
  try {
    approval = await ctx.waitEvent("approval", { timeout: "5m" });
  } catch (e) {
    if (!(e instanceof WaitTimeout)) throw e;
    ctx.log.info(`order ${order.id}: nobody approved it in time`);
    throw new ApplicationError("not approved in time", { type: "NotApproved" });
  }
  ctx.log.info(`order ${order.id} approved by ${approval.by}`);
  ctx.setCustomStatus("waiting for the courier");
  await ctx.sleep(order.courierDelay ?? 2, "courier slot");
  const shipment = await ctx.activity(ship, order);
  ctx.setCustomStatus("shipped");
  return {
    order: order.id, receipt: payment.receipt, parcel: parcel.parcel, tracking: shipment.tracking,
    approved_by: approval.by, shipped_at: ctx.now().toISOString().slice(0, 19) + "Z",
  };
}, { activityQueue: ACTIVITY_QUEUE });
