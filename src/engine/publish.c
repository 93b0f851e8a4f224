/*-------------------------------------------------------------------------
 *
 * publish.c
 *	  Runs' events out to the world (1.10): each event a run of a publishing
 *	  queue records goes out as a transactional logical decoding message.
 *
 * A queue publishes when dex.queue.publish is set (dex.alter_queue's
 * publish and publish_format).  Every place that appends a batch to a run's
 * history (workflow_rows.c for completed workflow tasks, lifecycle.c for a
 * run ended at once, reset.c for a reset's copied history) calls
 * dex_publish_events in the same transaction, so a consumer of logical
 * decoding (wal2json, pgoutput with messages, Debezium) receives each
 * committed event once, when its transaction commits, and never an event of
 * a transaction (or subtransaction) that rolled back.  Each message is a
 * dex.v1.PublishedEvent: prefix "dex" with its proto3 JSON, "dex.pb" with
 * its protobuf bytes (docs/publishing.md).
 *
 * Costs: nothing at all unless wal_level is logical; then a lookup in the
 * per-backend queue cache per history batch, and for a publishing queue one
 * WAL record per event.  Runs inside the caller's SPI connection (a queue
 * missing from the cache is read with one statement).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "replication/message.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"

#include "engine/engine.h"

#define PUBLISH_PREFIX_JSON "dex"
#define PUBLISH_PREFIX_PROTOBUF "dex.pb"

/*
 * Whether events may be published at all: a caller that must load a run to
 * publish its events asks first, so that with wal_level below logical (the
 * default) or a schema before 1.10 nothing is read.
 */
bool
dex_publish_possible(void)
{
	return XLogLogicalInfoActive() && dex_queue_publish_exists();
}

/*
 * Publish "n" events that run "run" (its queue, workflow and version) of
 * generation "generation" records from its history's position "sequence"
 * on, if its queue publishes.  The messages are part of the current
 * transaction.
 */
void
dex_publish_events(const pg_uuid_t *run_id, const DexRun *run, int32 generation, int32 sequence,
				   Dex__V1__WorkflowEvent **events, size_t n)
{
	DexQueue	queue;
	Dex__V1__PublishedEvent msg;
	MemoryContext cxt,
				old;

	if (n == 0 || !XLogLogicalInfoActive())
		return;
	if (!dex_queue_by_id(run->queue_id, &queue) || queue.publish == DEX_PUBLISH_OFF)
		return;

	dex__v1__published_event__init(&msg);
	msg.run_id = dex_uuid_to_cstring(run_id);
	cxt = AllocSetContextCreate(CurrentMemoryContext, "dex publish", ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(cxt);
	msg.queue = queue.name;
	msg.workflow_name = run->workflow_name;
	msg.workflow_version = run->workflow_version;
	msg.generation = generation;
	for (size_t i = 0; i < n; i++)
	{
		msg.sequence = sequence + (int32) i;
		msg.kind = dex_pb_case_json_name(&dex__v1__workflow_event__descriptor,
										 (uint32) events[i]->subject_case);
		if (msg.kind == NULL)
			msg.kind = "";
		msg.event = events[i];
		if (queue.publish == DEX_PUBLISH_PROTOBUF)
		{
			size_t		len;
			uint8	   *data = dex_pb_pack((ProtobufCMessage *) &msg, &len);

			LogLogicalMessage(PUBLISH_PREFIX_PROTOBUF, (const char *) data, len, true);
		}
		else
		{
			Jsonb	   *json = dex_pb_to_jsonb((ProtobufCMessage *) &msg);
			char	   *text = JsonbToCString(NULL, &json->root, VARSIZE(json));

			LogLogicalMessage(PUBLISH_PREFIX_JSON, text, strlen(text), true);
		}
		MemoryContextReset(cxt);
	}
	MemoryContextSwitchTo(old);
	MemoryContextDelete(cxt);
}

/* The same for one encoded dex.v1.EventBatch */
void
dex_publish_batch(const pg_uuid_t *run_id, const DexRun *run, int32 generation, int32 sequence,
				  bytea *batch)
{
	Dex__V1__EventBatch *b;

	if (!XLogLogicalInfoActive())
		return;
	b = (Dex__V1__EventBatch *) dex_pb_unpack(&dex__v1__event_batch__descriptor,
											  (const uint8 *) VARDATA_ANY(batch),
											  VARSIZE_ANY_EXHDR(batch), "history");
	dex_publish_events(run_id, run, generation, sequence, b->events, b->n_events);
}
