/*-------------------------------------------------------------------------
 *
 * api_complete.c
 *	  dex.complete_task and dex.complete_tasks, each with a protobuf form
 *	  (_pb): taking the results of tasks, the commands of a workflow task or
 *	  the result of an activity, and handing them to the engine
 *	  (engine/complete_workflow.c, engine/complete_activity.c).
 *
 * Locks and transactions.  A completion runs in the caller's transaction:
 * it takes the rebuild lock shared (engine/locks.c), and the engine
 * locks the runs before their task rows (the locking protocol,
 * src/README.md); a batch of both kinds locks all its runs first, at once,
 * in id order.  A completion needs the task's current lock version: one
 * task's call raises ERRCODE_DEX_LEASE_LOST on a lost lease, a batch
 * reports it as completed = false for that task and does not affect the
 * others.  Invalid input fails the whole call before anything is written.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/jsonb.h"

#include "api/api_tasks.h"

/* The commands of a workflow task from JSON: a WorkflowTaskCompletion or a bare array of commands */
static Dex__V1__WorkflowTaskCompletion *
completion_from_jsonb(Jsonb *json)
{
	Dex__V1__WorkflowTaskCompletion *completion;
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	int			n;

	if (!JB_ROOT_IS_ARRAY(json) || JB_ROOT_IS_SCALAR(json))
		return (Dex__V1__WorkflowTaskCompletion *)
			dex_pb_from_jsonb(&dex__v1__workflow_task_completion__descriptor, json,
							  "workflow task completion");

	completion = palloc(sizeof(*completion));
	dex__v1__workflow_task_completion__init(completion);
	n = JB_ROOT_COUNT(json);
	completion->commands = palloc(sizeof(Dex__V1__Command *) * Max(n, 1));
	it = JsonbIteratorInit(&json->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok != WJB_ELEM)
			continue;
		completion->commands[completion->n_commands++] = (Dex__V1__Command *)
			dex_pb_from_jsonb(&dex__v1__command__descriptor, JsonbValueToJsonb(&v),
							  "command");
	}
	return completion;
}

/* The commands of a workflow task, from either form, checked as far as they can be alone */
static Dex__V1__WorkflowTaskCompletion *
completion_from(Datum result, bool isnull, bool protobuf)
{
	Dex__V1__WorkflowTaskCompletion *completion;

	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("a workflow task needs its commands"),
				 errhint("Pass a JSON array of commands, or {\"commands\": [...]}.")));
	if (protobuf)
	{
		bytea	   *data = DatumGetByteaPP(result);

		dex_check_payload_size(VARSIZE_ANY_EXHDR(data), "command list");
		completion = (Dex__V1__WorkflowTaskCompletion *)
			dex_pb_unpack(&dex__v1__workflow_task_completion__descriptor,
						  (uint8 *) VARDATA_ANY(data), VARSIZE_ANY_EXHDR(data),
						  "workflow task completion");
	}
	else
	{
		Jsonb	   *json = DatumGetJsonbP(result);

		dex_check_payload_size(VARSIZE(json), "command list");
		completion = completion_from_jsonb(json);
	}
	dex_pb_check_payloads((ProtobufCMessage *) completion, "workflow task completion");
	dex_check_commands(completion);
	return completion;
}

/* The result of an activity, from either form; NULL for none */
static Dex__V1__Payload *
activity_result_from(Datum result, bool isnull, bool protobuf)
{
	if (isnull)
		return NULL;
	return protobuf ?
		dex_payload_from_bytea(DatumGetByteaPP(result), "result") :
		dex_payload_from_jsonb(DatumGetJsonbP(result));
}

/* The completions of a call, parsed, by kind */
typedef struct Completions
{
	DexWorkflowCompletion *wf;
	int			n_wf;
	DexActivityCompletion *act;
	int			n_act;
} Completions;

static Completions
completions_for(int n)
{
	Completions c;

	c.wf = palloc0(sizeof(DexWorkflowCompletion) * Max(n, 1));
	c.act = palloc0(sizeof(DexActivityCompletion) * Max(n, 1));
	c.n_wf = 0;
	c.n_act = 0;
	return c;
}

/* Parse the completion of one task (result: its commands or its result) */
static void
add_completion(Completions *c, Datum run_id, int32 task_id, Datum lock_version,
			   Datum result, bool isnull, bool protobuf)
{
	if (task_id == 0)
	{
		DexWorkflowCompletion *item = &c->wf[c->n_wf++];

		item->run_id = DatumGetUUIDP(run_id);
		item->lock_version = DatumGetInt64(lock_version);
		item->completion = completion_from(result, isnull, protobuf);
	}
	else
	{
		DexActivityCompletion *item = &c->act[c->n_act++];

		item->run_id = DatumGetUUIDP(run_id);
		item->task_id = task_id;
		item->lock_version = DatumGetInt64(lock_version);
		item->result = activity_result_from(result, isnull, protobuf);
	}
}

/*
 * dex.complete_task(run_id, task_id, lock_version, result jsonb) and
 * dex.complete_task_pb(..., result bytea): a batch of one that raises on a
 * lost lease.
 */
static Datum
complete_task(FunctionCallInfo fcinfo, bool protobuf)
{
	Completions c = completions_for(1);

	dex_completion_begins();
	dex_check_task_args(fcinfo);
	SPI_connect();
	dex_wait_for_rebuild();
	add_completion(&c, PG_GETARG_DATUM(0), PG_GETARG_INT32(1), PG_GETARG_DATUM(2),
				   PG_ARGISNULL(3) ? (Datum) 0 : PG_GETARG_DATUM(3), PG_ARGISNULL(3),
				   protobuf);
	if (c.n_wf > 0)
		dex_complete_workflow_tasks(c.wf, 1, true);
	else
		dex_complete_activity_tasks(c.act, 1, true);
	SPI_finish();
	PG_RETURN_VOID();
}

DEX_JSON_AND_PB_ENTRY_POINTS(dex_complete_task, dex_complete_task_pb, complete_task);

/*
 * dex.complete_tasks(run_ids, task_ids, lock_versions, results jsonb[]) and
 * dex.complete_tasks_pb(..., results bytea[]): complete many tasks in one
 * transaction.  A lost lease is reported as completed = false for its task
 * and does not affect the others; invalid input fails the whole call.
 */
/* Parse a batch's results: invalid input fails the call before any write */
static Completions
parse_batch(const DexTaskBatch *b, bool protobuf)
{
	Completions c = completions_for(b->n);

	for (int i = 0; i < b->n; i++)
		add_completion(&c, b->run_ids[i], DatumGetInt32(b->task_ids[i]), b->lock_versions[i],
					   b->values[i], b->value_nulls[i], protobuf);
	return c;
}

/* Complete a parsed batch, in the caller's SPI connection */
static void
complete_batch(const DexTaskBatch *b, Completions *c)
{
	dex_wait_for_rebuild();
	/* a batch of both kinds locks all its runs at once, in id order */
	if (c->n_wf > 0 && c->n_act > 0)
		dex_lock_batch_runs(b, false);
	/* activity results first: a workflow task completed in the same batch
	 * then sees them as unseen events and is requeued for them */
	dex_complete_activity_tasks(c->act, c->n_act, false);
	dex_complete_workflow_tasks(c->wf, c->n_wf, false);
}

/*
 * Complete a batch read with dex_read_task_batch_at, in the caller's SPI
 * connection (dex.poll_tasks_wait's completions): done[i] says whether
 * task i was completed (false: its lease was lost), in the batch's order.
 */
void
dex_complete_task_batch(const DexTaskBatch *b, bool protobuf, bool *done)
{
	Completions c = parse_batch(b, protobuf);
	int			wf = 0,
				act = 0;

	complete_batch(b, &c);
	for (int i = 0; i < b->n; i++)
		done[i] = DatumGetInt32(b->task_ids[i]) == 0 ? c.wf[wf++].done : c.act[act++].done;
}

static Datum
complete_tasks(FunctionCallInfo fcinfo, bool protobuf)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	DexTaskBatch b;
	Completions c;

	dex_completion_begins();
	b = dex_read_task_batch(fcinfo, protobuf ? BYTEAOID : JSONBOID, "results");
	c = parse_batch(&b, protobuf);

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	complete_batch(&b, &c);
	SPI_finish();

	for (int i = 0; i < c.n_act; i++)
		dex_put_batch_row(rsinfo, UUIDPGetDatum(c.act[i].run_id), Int32GetDatum(c.act[i].task_id),
						  BoolGetDatum(c.act[i].done));
	for (int i = 0; i < c.n_wf; i++)
		dex_put_batch_row(rsinfo, UUIDPGetDatum(c.wf[i].run_id), Int32GetDatum(0),
						  BoolGetDatum(c.wf[i].done));
	return (Datum) 0;
}

DEX_JSON_AND_PB_ENTRY_POINTS(dex_complete_tasks, dex_complete_tasks_pb, complete_tasks);
