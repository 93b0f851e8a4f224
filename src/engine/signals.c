/*-------------------------------------------------------------------------
 *
 * signals.c
 *	  External events: delivering them to runs, one or many at a time.
 *
 * One path for every sender: dex.send_external_event and
 * dex.send_external_event_to_instance (one event), dex.send_external_events
 * (many, with an outcome per row) and a workflow's signalExternalRun command
 * (commands_apply.c).  An event reaches an active run of a queue the caller
 * may use once per (run, event id): dex.external_event drops duplicates, and
 * the event (ExternalEventReceived) goes to the run's inbox.  Each event has
 * an outcome: delivered, a duplicate (dropped), the run had ended, or no such
 * run (a run of a queue the caller may not use looks as if it did not exist,
 * access.c).
 *
 * Locks (src/README.md, the locking protocol): an API call locks the target
 * runs FOR SHARE, all in one statement in run id order, before it writes: a
 * completion that ends one waits for the event to be in its inbox (and then
 * withdraws it with the run's other work), or has ended it, and the event is
 * refused.  Its events are visible at once and make sure the runs have a
 * workflow task.  A completion sending signalExternalRun holds its own run's
 * lock FOR NO KEY UPDATE: taking another run's lock then could deadlock with
 * that run signalling back, so it locks nothing (rule 4): it reads the
 * target's status, and writes the event due at once but handed over by the
 * scheduler.  The dedup row's unique index serializes two senders of the same
 * (run, event id); the inbox row's foreign key takes only a KEY SHARE lock,
 * which a completion's FOR NO KEY UPDATE does not block.  A target that ends
 * between that read and the commit has the event in its inbox like one that
 * arrived just before its end: withdrawn with its other work.
 *
 * Runs in the caller's transaction and SPI connection; a fixed number of
 * statements whatever the number of events.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/uuid.h"

#include "engine/engine.h"

/* [0] without a lock (a completion's signal), [1] locked FOR SHARE (the API) */
#define TARGETS_SQL(lock) \
	"SELECT id, status, queue_id FROM dex.workflow_run WHERE id = ANY ($1) ORDER BY id" lock
static DexPlan targets_plans[2] = {
	{TARGETS_SQL(""), 1, {UUIDARRAYOID}},
	{TARGETS_SQL(" FOR SHARE"), 1, {UUIDARRAYOID}}
};

/* the events not received before; returns the pairs it recorded */
static DexPlan record_events_plan = {
	"INSERT INTO dex.external_event (run_id, event_id, received_at) "
	"SELECT r, e, now() FROM unnest($1::uuid[], $2::text[]) AS u(r, e) "
	"ON CONFLICT DO NOTHING RETURNING run_id, event_id",
	2, {UUIDARRAYOID, TEXTARRAYOID}
};

/* An event of the batch, by (run, event id) */
typedef struct SignalKey
{
	pg_uuid_t	run_id;
	char		event_id[DEX_NAME_MAX_LEN + 1];
} SignalKey;

typedef struct SignalEntry
{
	SignalKey	key;
	int			index;			/* the first event of the batch with this key */
	bool		recorded;
} SignalEntry;

typedef struct SignalTarget
{
	pg_uuid_t	run_id;
	Dex__V1__SignalOutcome outcome;	/* DELIVERED: active, may take the event */
} SignalTarget;

static void
event_key(SignalKey *key, const pg_uuid_t *run_id, const char *event_id)
{
	memset(key, 0, sizeof(*key));
	key->run_id = *run_id;
	strlcpy(key->event_id, event_id, sizeof(key->event_id));
}

/*
 * The runs the events go to, with what they can take: DELIVERED for an
 * active run, TARGET_ENDED, TARGET_NOT_FOUND.
 */
static HTAB *
load_targets(int n, pg_uuid_t **run_ids, bool lock)
{
	HTAB	   *targets = dex_batch_table("dex external event targets", sizeof(pg_uuid_t),
										  sizeof(SignalTarget), n, HASH_BLOBS);
	Datum		values[1] = {dex_uuid_array(run_ids, n)};
	DexRows		rows = dex_spi_rows(&targets_plans[lock ? 1 : 0], values, NULL, 0);

	for (uint64 i = 0; i < rows.n; i++)
	{
		bool		isnull;
		pg_uuid_t  *id = DatumGetUUIDP(dex_rows_getdatum(rows, i, 1, &isnull));
		SignalTarget *t = hash_search(targets, id, HASH_ENTER, NULL);

		if (!dex_may_use_queue_id((int32) dex_rows_getint64(rows, i, 3)))
			t->outcome = DEX__V1__SIGNAL_OUTCOME__SIGNAL_OUTCOME_TARGET_NOT_FOUND;
		else if (dex_status_is_terminal(dex_rows_gettext_copy(rows, i, 2)))
			t->outcome = DEX__V1__SIGNAL_OUTCOME__SIGNAL_OUTCOME_TARGET_ENDED;
		else
			t->outcome = DEX__V1__SIGNAL_OUTCOME__SIGNAL_OUTCOME_DELIVERED;
	}
	return targets;
}

/*
 * Deliver n external events: event_ids[i] with payloads[i] (NULL: none) to
 * run run_ids[i]; outcomes[i] says what became of each.  "lock": the caller
 * holds no run lock (an API call) and the targets are locked FOR SHARE; else
 * (a completion) nothing is locked and the scheduler hands the events over
 * (see the file header).  The first of two equal (run, event id) pairs is
 * delivered, the second is a duplicate.
 */
void
dex_deliver_external_events(int n, pg_uuid_t **run_ids, char **event_ids,
							Dex__V1__Payload **payloads, bool lock,
							Dex__V1__SignalOutcome *outcomes)
{
	HTAB	   *targets = load_targets(n, run_ids, lock);
	HTAB	   *events = dex_batch_table("dex external events", sizeof(SignalKey), sizeof(SignalEntry), n,
									  HASH_BLOBS);
	ArrayBuildState *rec_runs = initArrayResult(UUIDOID, CurrentMemoryContext, false);
	ArrayBuildState *rec_events = initArrayResult(TEXTOID, CurrentMemoryContext, false);
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	DexInboxBatch inbox;
	int			candidates = 0;

	for (int i = 0; i < n; i++)
	{
		SignalTarget *t = hash_search(targets, run_ids[i], HASH_FIND, NULL);
		SignalKey	key;
		SignalEntry *e;
		bool		found;

		outcomes[i] = t ? t->outcome : DEX__V1__SIGNAL_OUTCOME__SIGNAL_OUTCOME_TARGET_NOT_FOUND;
		if (outcomes[i] != DEX__V1__SIGNAL_OUTCOME__SIGNAL_OUTCOME_DELIVERED)
			continue;
		event_key(&key, run_ids[i], event_ids[i]);
		e = hash_search(events, &key, HASH_ENTER, &found);
		if (found)
		{
			outcomes[i] = DEX__V1__SIGNAL_OUTCOME__SIGNAL_OUTCOME_DUPLICATE;
			continue;
		}
		e->index = i;
		e->recorded = false;
		dex_array_add(rec_runs, UUIDPGetDatum(run_ids[i]), false);
		dex_array_add(rec_events, CStringGetTextDatum(event_ids[i]), false);
		candidates++;
	}
	if (candidates == 0)
		return;

	{
		Datum		values[2] = {dex_array_result(rec_runs), dex_array_result(rec_events)};
		DexRows		rows = dex_spi_rows(&record_events_plan, values, NULL, 0);

		for (uint64 r = 0; r < rows.n; r++)
		{
			bool		isnull;
			SignalKey	key;
			SignalEntry *e;

			event_key(&key, DatumGetUUIDP(dex_rows_getdatum(rows, r, 1, &isnull)),
					  dex_rows_gettext_copy(rows, r, 2));
			e = hash_search(events, &key, HASH_FIND, NULL);
			if (e != NULL)
				e->recorded = true;
		}
	}

	dex_inbox_batch_init(&inbox);
	for (int i = 0; i < n; i++)
	{
		SignalKey	key;
		SignalEntry *e;
		Dex__V1__WorkflowEvent *ev;

		if (outcomes[i] != DEX__V1__SIGNAL_OUTCOME__SIGNAL_OUTCOME_DELIVERED)
			continue;
		event_key(&key, run_ids[i], event_ids[i]);
		e = hash_search(events, &key, HASH_FIND, NULL);
		if (e == NULL || e->index != i || !e->recorded)
		{
			/* received before (or by a concurrent sender): dropped */
			outcomes[i] = DEX__V1__SIGNAL_OUTCOME__SIGNAL_OUTCOME_DUPLICATE;
			continue;
		}
		ev = dex_event_external_event_received(now, pstrdup(event_ids[i]), payloads[i]);
		if (lock)
			dex_inbox_batch_add(&inbox, run_ids[i], ev, now);
		else
			dex_inbox_batch_add_unlocked(&inbox, run_ids[i], ev);
	}
	dex_inbox_batch_flush(&inbox);
}

/* The outcome's name in SQL results: DELIVERED, DUPLICATE, TARGET_ENDED, TARGET_NOT_FOUND */
const char *
dex_signal_outcome_name(Dex__V1__SignalOutcome outcome)
{
	switch (outcome)
	{
		case DEX__V1__SIGNAL_OUTCOME__SIGNAL_OUTCOME_DELIVERED:
			return "DELIVERED";
		case DEX__V1__SIGNAL_OUTCOME__SIGNAL_OUTCOME_DUPLICATE:
			return "DUPLICATE";
		case DEX__V1__SIGNAL_OUTCOME__SIGNAL_OUTCOME_TARGET_ENDED:
			return "TARGET_ENDED";
		default:
			return "TARGET_NOT_FOUND";
	}
}
