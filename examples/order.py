"""The demo's order workflow (test/demo.sh runs it through examples/demo.py).

An order fans out three activities in parallel (reserve the stock, charge the card,
pack the parcel), waits for a manager's approval (an external event) with a timeout,
sleeps on a durable timer until the courier's pick-up slot, ships and completes.

Activities append a line to the file named by DEX_DEMO_LOG (when set), so the demo can
count how many times each one really ran, across worker processes.
"""

import os
import time
from datetime import timedelta

import dex

ACTIVITY_QUEUE = "order-activities"


def _note(what):
    print(what, flush=True)
    path = os.environ.get("DEX_DEMO_LOG")
    if path:
        with open(path, "a") as f:
            f.write(what + "\n")


def _work(name, order, seconds):
    info = dex.activity_context().info
    _note(f"activity {name} for order {order['id']}: attempt {info.attempt} started")
    time.sleep(seconds)
    _note(f"activity {name} for order {order['id']}: attempt {info.attempt} done")


@dex.activity("reserve_stock")
def reserve_stock(order):
    _work("reserve_stock", order, 0.2)
    return {"reserved": order["items"]}


@dex.activity("charge_card")
def charge_card(order):
    _work("charge_card", order, 0.4)
    return {"receipt": f"R-{order['id']}", "amount": order["amount"]}


@dex.activity("pack_parcel", retry=dex.RetryPolicy(initial_delay=0.5, randomization_factor=0))
def pack_parcel(order):
    _work("pack_parcel", order, order.get("packing_seconds", 3))
    return {"parcel": f"P-{order['id']}"}


@dex.activity("ship")
def ship(order):
    _work("ship", order, 0.1)
    return {"tracking": f"TRK-{order['id']}"}


@dex.workflow("order", version=1, activity_queue=ACTIVITY_QUEUE)
async def order_workflow(ctx, order):
    ctx.logger.info("order %s received: %s", order["id"], order["items"])

    # three activities at once; each is retried by its policy
    stock, payment, parcel = await ctx.all_of(
        ctx.activity(reserve_stock, order),
        ctx.activity(charge_card, order),
        ctx.activity(pack_parcel, order, start_to_close_timeout=60))

    ctx.set_custom_status("awaiting approval")
    try:
        approval = await ctx.wait_event("approval", timeout=timedelta(minutes=5))
    except dex.WaitTimeout:
        ctx.logger.info("order %s: nobody approved it in time", order["id"])
        raise dex.ApplicationError("not approved in time", type="NotApproved")
    ctx.logger.info("order %s approved by %s", order["id"], approval["by"])

    ctx.set_custom_status("waiting for the courier")
    await ctx.sleep(order.get("courier_delay", 2), name="courier slot")

    shipment = await ctx.activity(ship, order)
    ctx.set_custom_status("shipped")
    return {"order": order["id"], "receipt": payment["receipt"], "parcel": parcel["parcel"],
            "tracking": shipment["tracking"], "approved_by": approval["by"],
            "shipped_at": ctx.now().isoformat(timespec="seconds")}
