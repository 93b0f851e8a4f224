"""A saga: book a trip as three steps, and undo the steps done when a later one fails.

    python3 examples/saga.py        # with PGHOST, PGDATABASE, ... naming a database with dex

Each booking is an activity; each has a compensation (another activity).  When a step
fails for good, the workflow runs the compensations of the steps that succeeded, in
reverse order, and fails the run with the original error.  The compensations are
ordinary activities: they are recorded, retried, and survive worker crashes like
everything else.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python"))

import dex  # noqa: E402

QUEUE, ACTIVITIES = "trips", "trip-bookings"
NO_RETRY = dex.RetryPolicy(max_attempts=1)
undone = []        # what the compensations did, for the printout


@dex.activity("book_flight")
def book_flight(trip):
    return f"flight to {trip['to']}"


@dex.activity("book_hotel")
def book_hotel(trip):
    return f"hotel in {trip['to']}"


@dex.activity("book_car")
def book_car(trip):
    if trip.get("car_sold_out"):
        raise dex.NonRetryableError(f"no car left in {trip['to']}", type="SoldOut")
    return f"car in {trip['to']}"


@dex.activity("cancel_booking")
def cancel_booking(booking):
    undone.append(booking)
    return f"cancelled {booking}"


@dex.workflow("book_trip", activity_queue=ACTIVITIES)
async def book_trip(ctx, trip):
    compensations = []
    try:
        for step in (book_flight, book_hotel, book_car):
            booking = await ctx.activity(step, trip, retry=NO_RETRY)
            compensations.append(booking)
        return {"booked": compensations}
    except dex.ActivityError as failure:
        ctx.logger.info("trip to %s failed (%s): compensating", trip["to"], failure.type)
        for booking in reversed(compensations):
            await ctx.activity(cancel_booking, booking)
        raise


def main(conninfo=""):
    client = dex.Client(conninfo)
    client.create_queue(QUEUE, "workflow")
    client.create_queue(ACTIVITIES, "activity")
    results = {}
    undone.clear()
    with dex.Worker(conninfo, [QUEUE], [ACTIVITIES], concurrency=4,
                    workflows=[book_trip],
                    activities=[book_flight, book_hotel, book_car, cancel_booking]):
        ok = client.start(book_trip, {"to": "Lisbon"}, queue=QUEUE)
        bad = client.start(book_trip, {"to": "Oslo", "car_sold_out": True}, queue=QUEUE)
        results["Lisbon"] = client.result(ok, timeout=30)
        try:
            client.result(bad, timeout=30)
        except dex.RunFailedError as e:
            results["Oslo"] = {"failed": e.failure["cause"]["message"], "undone": undone[:]}
    for to, r in results.items():
        print(f"{to}: {r}")
    print(client.format_history(bad))
    client.close()
    return results


if __name__ == "__main__":
    main()
